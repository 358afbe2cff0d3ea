"""Evaluation metrics for every task, as small self-contained functions; :func:`compute` picks a task's by name:

>>> compute("mrpc", [1, 0, 1, 1], [1, 0, 0, 1])
{'accuracy': 0.75, 'f1': 0.8, 'combined_score': 0.775}
"""

from __future__ import annotations

import itertools
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Optional


def accuracy(predictions: Sequence[int], references: Sequence[int]) -> float:
    """Fraction of predictions equal to their reference."""
    return sum(int(p) == int(r) for p, r in zip(predictions, references)) / len(references)


def binary_f1(predictions: Sequence[int], references: Sequence[int]) -> float:
    """F1 of the positive class (label 1); 0 when there is no true positive."""
    true_pos = sum(int(p) == 1 and int(r) == 1 for p, r in zip(predictions, references))
    return _f1(true_pos, sum(int(p) == 1 for p in predictions), sum(int(r) == 1 for r in references))


def _f1(hits: int, predicted: int, gold: int) -> float:
    """The harmonic mean of precision ``hits / predicted`` and recall ``hits / gold``; 0 without a hit."""
    if hits == 0:
        return 0.0
    precision, recall = hits / predicted, hits / gold
    return 2 * precision * recall / (precision + recall)


def matthews_correlation(predictions: Sequence[int], references: Sequence[int]) -> float:
    """Matthews correlation coefficient (multi-class form); 0 when undefined (a constant row or column)."""
    labels = sorted({int(x) for x in predictions} | {int(x) for x in references})
    predicted_counts = Counter(int(p) for p in predictions)
    true_counts = Counter(int(r) for r in references)
    n = len(references)
    correct = sum(int(p) == int(r) for p, r in zip(predictions, references))
    covariance = correct * n - sum(predicted_counts[k] * true_counts[k] for k in labels)
    pred_spread = n * n - sum(predicted_counts[k] ** 2 for k in labels)
    true_spread = n * n - sum(true_counts[k] ** 2 for k in labels)
    return 0.0 if pred_spread == 0 or true_spread == 0 else covariance / math.sqrt(pred_spread * true_spread)


def pearson(predictions: Sequence[float], references: Sequence[float]) -> Optional[float]:
    """Pearson correlation; None (undefined) when either side is constant, NaN when a value is not finite."""
    xs = [float(p) for p in predictions]
    ys = [float(r) for r in references]
    if not _all_finite(xs, ys):
        return math.nan
    if len(set(xs)) < 2 or len(set(ys)) < 2:  # the values, not their distances from a rounded mean
        return None
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    dx = [x - mean_x for x in xs]
    dy = [y - mean_y for y in ys]
    scale_x, scale_y = max(map(abs, dx)), max(map(abs, dy))
    dx, dy = [d / scale_x for d in dx], [d / scale_y for d in dy]  # no underflow of tiny spreads when squared
    spread = math.sqrt(sum(d * d for d in dx) * sum(d * d for d in dy))
    return max(-1.0, min(1.0, sum(a * b for a, b in zip(dx, dy)) / spread))


def _all_finite(*sequences: Sequence[float]) -> bool:
    return all(math.isfinite(float(value)) for values in sequences for value in values)


def average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks starting at 1, ties sharing the average of the ranks they span."""
    ranks = [0.0] * len(values)
    start = 0
    for _, tied in itertools.groupby(sorted(range(len(values)), key=lambda i: values[i]), key=lambda i: values[i]):
        tied = list(tied)
        for index in tied:
            ranks[index] = start + (len(tied) + 1) / 2
        start += len(tied)
    return ranks


def spearman(predictions: Sequence[float], references: Sequence[float]) -> Optional[float]:
    """Spearman rank correlation (Pearson of average ranks); None when undefined, NaN for non-finite values."""
    if not _all_finite(predictions, references):
        return math.nan
    return pearson(average_ranks([float(p) for p in predictions]), average_ranks([float(r) for r in references]))


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 answer normalisation: lower-case, drop punctuation and articles, fold whitespace."""
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def answer_f1(prediction: str, gold: str) -> float:
    """Token-overlap F1 of two normalised answers, in [0, 1]."""
    predicted_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    overlap = sum((Counter(predicted_tokens) & Counter(gold_tokens)).values())
    return _f1(overlap, len(predicted_tokens), len(gold_tokens))


def squad_exact_match(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """Percentage of predictions equal (after normalisation) to at least one gold answer."""
    hits = sum(max(normalize_answer(p) == normalize_answer(g) for g in golds)
               for p, golds in zip(predictions, references))
    return 100.0 * hits / len(references)


def squad_f1(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """Mean over questions of the best token F1 against any gold answer, x100."""
    total = sum(max(answer_f1(p, g) for g in golds) for p, golds in zip(predictions, references))
    return 100.0 * total / len(references)


def perplexity(nll_sums: Sequence[float], token_counts: Sequence[int]) -> float:
    """exp of the mean negative log-likelihood per predicted token, pooled over texts; NaN when there is none."""
    return math.exp(nll_per_token(nll_sums, token_counts))


def nll_per_token(nll_sums: Sequence[float], token_counts: Sequence[int]) -> float:
    """The mean negative log-likelihood (nats) per predicted token, pooled over texts; NaN when none was predicted."""
    tokens = sum(int(count) for count in token_counts)
    total = sum(float(value) for value in nll_sums)
    return total / tokens if tokens and math.isfinite(total) else math.nan


Scorer = Callable[[Sequence, Sequence], float]

TASK_SCORERS: dict[str, dict[str, Scorer]] = {
    **dict.fromkeys(("sst2", "qnli", "rte", "sst5", "mnli", "mnli_mismatched", "wnli", "movie_snippets", "snli"),
                    {"accuracy": accuracy}),
    **dict.fromkeys(("mrpc", "qqp"), {"accuracy": accuracy, "f1": binary_f1}),
    "cola": {"matthews_correlation": matthews_correlation},
    "stsb": {"pearson": pearson, "spearman": spearman},
    "squad": {"exact_match": squad_exact_match, "f1": squad_f1},
    "lm": {"perplexity": perplexity, "nll_per_token": nll_per_token},  # predictions: NLL sums; references: token counts
}


def better_sign(metric: str) -> int:
    """+1 when a higher ``metric`` is better, -1 when a lower one is: multiply by it to compare or rank."""
    return -1 if metric in ("perplexity", "nll_per_token") else 1


TASKS_WITH_COMBINED_SCORE = frozenset({"mrpc", "qqp", "stsb"})  # their results add the mean of their metrics


def metric_names(task: str) -> tuple[str, ...]:
    """The keys :func:`compute` returns for ``task``."""
    names = tuple(_scorers(task))
    return names + ("combined_score",) if task in TASKS_WITH_COMBINED_SCORE else names


def main_metric(task: str) -> str:
    """The metric a task is judged and selected on: its combined score where it has one, else its first metric."""
    return "combined_score" if task in TASKS_WITH_COMBINED_SCORE else metric_names(task)[0]


def compute(task: str, predictions: Sequence, references: Sequence) -> dict[str, float]:
    """All metrics of ``task``: of label ids, floats, or (``squad``) answer strings against lists of gold answers."""
    scorers = _scorers(task)
    predictions, references = list(predictions), list(references)
    if len(predictions) != len(references):
        raise ValueError(f"{task}: {len(predictions)} predictions but {len(references)} references")
    if not references:
        raise ValueError(f"{task}: no predictions to score")
    if task == "squad":
        for index, (prediction, golds) in enumerate(zip(predictions, references)):
            if not isinstance(prediction, str):
                raise TypeError(f"squad: prediction {index} must be an answer string, got {type(prediction).__name__}")
            if isinstance(golds, str) or not golds or not all(isinstance(g, str) for g in golds):
                raise TypeError(f"squad: reference {index} must be a non-empty list of answer strings, got {golds!r}")
    results = {name: score(predictions, references) for name, score in scorers.items()}
    results = {name: None if value is None else float(value) for name, value in results.items()}  # None: undefined
    if task in TASKS_WITH_COMBINED_SCORE:
        results["combined_score"] = None if None in results.values() else sum(results.values()) / len(results)
    return results


def collapsed(kind: str, predictions: Sequence) -> Optional[bool]:
    """Whether a classifier predicted one class for every example (a regressor one value); None where undefined."""
    return len(set(predictions)) <= 1 if kind in ("classification", "regression") else None


def _scorers(task: str) -> dict[str, Scorer]:
    try:
        return TASK_SCORERS[task]
    except KeyError:
        raise KeyError(f"no metrics for task {task!r}; known tasks: {', '.join(sorted(TASK_SCORERS))}") from None


UNDEFINED_SUFFIX = "_undefined"  # NAME_undefined: why measure NAME is None


def undefined_text(measures: dict[str, Any], name: str, spec: str) -> str:
    """Measure ``name`` of ``measures`` formatted with ``spec``, or ``undefined (why)``."""
    if (value := measures.get(name)) is None:
        return f"undefined ({measures.get(name + UNDEFINED_SUFFIX, 'not computed')})"
    return format(value, spec)
