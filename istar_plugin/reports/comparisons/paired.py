"""A method against Base, paired by seed: the difference per seed, its mean, a bootstrap interval and a verdict."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ...metrics import TASK_SCORERS, better_sign
from ..records.cells import as_percent

ROUNDS = 2000  # bootstrap rounds; the generator is seeded, so a report is reproducible
LEVEL = 0.95
UNDEFINED = "undefined (one seed)"
EXAMPLES = "seeds and examples"  # ``resampled`` of a comparison that resampled the examples within each seed
EXAMPLES_ONLY = "examples only"  # ``resampled`` of one seed's comparison, its verdict marked ONE_SEED
ONE_SEED = " (one seed: examples only)"
Outcome = tuple[Sequence, Sequence]  # (predictions, references) of one run on the evaluation split


@dataclass(frozen=True)
class PairedDifference:
    """Method minus Base in the metric's percentage points, per common seed, with its bootstrap interval."""

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    low: float
    high: float
    resampled: str  # EXAMPLES, EXAMPLES_ONLY (one seed), "seeds", or "seeds (why the examples were not)"
    lower_is_better: bool = False  # a perplexity: a negative difference is the better model

    @property
    def mean(self) -> float:
        return statistics.fmean(self.differences)

    @property
    def verdict(self) -> str:
        """``better``, ``worse`` or ``not distinguishable`` (:data:`ONE_SEED` marked), or :data:`UNDEFINED`."""
        one_seed = len(self.seeds) < 2
        if one_seed and self.resampled not in (EXAMPLES, EXAMPLES_ONLY):
            return UNDEFINED
        above, below = ("worse", "better") if self.lower_is_better else ("better", "worse")
        decided = above if self.low > 0 else below if self.high < 0 else "not distinguishable"
        return decided + ONE_SEED if one_seed else decided

    @property
    def decided(self) -> bool:
        """Whether the verdict is ``better`` or ``worse`` over at least two seeds."""
        return self.verdict in ("better", "worse")

    def columns(self) -> dict[str, Any]:
        """The comparison's columns in a table's rows: seeds, difference, low, high, verdict, per_seed, resampled."""
        return {"seeds": len(self.seeds), "difference": self.mean, "low": self.low, "high": self.high,
                "verdict": self.verdict, "per_seed": " ".join(signed(d) for d in self.differences),
                "resampled": self.resampled}

    def text(self) -> str:
        """``+1.23 [-0.40, +2.90] better`` (Markdown cells)."""
        short = self.verdict.replace("not distinguishable", "n.d.")
        return f"{signed(self.mean)} [{signed(self.low)}, {signed(self.high)}] {short}"


def signed(value: float) -> str:
    """A difference with its sign: two decimals, or two significant digits when it would round to zero.

    >>> signed(1.234), signed(-0.0000437), signed(0.0)
    ('+1.23', '-4.4e-05', '+0.00')
    """
    return f"{value:+.2f}" if value == 0 or abs(value) >= 0.005 else f"{value:+.1e}"


def paired_difference(task: str, metric: str, method: dict[int, Optional[Outcome]], base: dict[int, Optional[Outcome]],
                      scores: Optional[tuple[dict[int, float], dict[int, float]]] = None, rounds: int = ROUNDS,
                      seed: int = 0) -> Optional[PairedDifference]:
    """The paired comparison of ``method`` and ``base`` runs (seed -> outcome) on their common seeds; None without.
    ``scores`` (seed -> percentage, method then Base): resampled alone where the examples cannot be."""
    seeds = sorted(set(method) & set(base))
    if not seeds:
        return None
    scorer = TASK_SCORERS.get(task, {}).get(metric)
    outcomes = [(method[s], base[s]) for s in seeds]
    examples = resamples_examples(task, metric) and all(
        m is not None and b is not None and list(m[1]) == list(b[1]) for m, b in outcomes)
    if examples:
        differences = [as_percent(task, metric, scorer(*m) - scorer(*b)) for m, b in outcomes]
        resample = hierarchical_bootstrap if metric in CONFUSION_METRICS else pooled_bootstrap
        low, high = (as_percent(task, metric, end) for end in
                     resample([(m[0], b[0], m[1]) for m, b in outcomes], metric, rounds, seed))
    else:
        if scores is None:
            return None
        differences = [scores[0][s] - scores[1][s] for s in seeds]
        low, high = _bootstrap([(d,) for d in differences], lambda rng, d, size: d, rounds, seed, LEVEL)
    resampled = (EXAMPLES if len(seeds) > 1 else EXAMPLES_ONLY) if examples else "seeds"
    return PairedDifference(tuple(seeds), tuple(differences), low, high, resampled,
                            lower_is_better=better_sign(metric) < 0)


def resamples_examples(task: str, metric: str) -> bool:
    """Whether a comparison on ``metric`` resamples the evaluation examples of runs that recorded them.

    >>> [resamples_examples(*metric) for metric in (("rte", "accuracy"), ("lm", "perplexity"), ("stsb", "pearson"))]
    [True, True, False]
    """
    return (metric in CONFUSION_METRICS or metric in POOLED_METRICS) and metric in TASK_SCORERS.get(task, {})


def hierarchical_bootstrap(pairs: Sequence[tuple[Sequence, Sequence, Sequence]], metric: str, rounds: int = ROUNDS,
                           seed: int = 0, level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of the mean over seeds of ``metric(method) - metric(Base)``, resampling seeds, then examples.
    ``pairs``: per seed (method predictions, Base predictions, references); ``metric`` in :data:`CONFUSION_METRICS`."""
    def draw(rng: np.random.Generator, method: Sequence, base: Sequence, references: Sequence, size: int) -> np.ndarray:
        labels = sorted(set(method) | set(base) | set(references))
        code = {label: i for i, label in enumerate(labels)}
        k = len(labels)
        triples = [(code[m] * k + code[b]) * k + code[r] for m, b, r in zip(method, base, references)]
        shares = np.bincount(triples, minlength=k ** 3) / len(triples)
        counts = rng.multinomial(len(triples), shares, size=size).reshape(-1, k, k, k)
        score, positive = CONFUSION_METRICS[metric], code.get(1)
        return score(counts.sum(axis=2), positive) - score(counts.sum(axis=1), positive)

    return _bootstrap(pairs, draw, rounds, seed, level)


def pooled_bootstrap(pairs: Sequence[tuple[Sequence, Sequence, Sequence]], metric: str, rounds: int = ROUNDS,
                     seed: int = 0, level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of the mean over seeds of a :data:`POOLED_METRICS` difference, resampling seeds, then texts.
    ``pairs``: per seed (method NLL sums, Base NLL sums, token counts), one entry per text."""
    def draw(rng: np.random.Generator, method: Sequence, base: Sequence, tokens: Sequence, size: int) -> np.ndarray:
        weights = rng.multinomial(len(tokens), np.full(len(tokens), 1 / len(tokens)), size=size)
        total = weights @ np.asarray(tokens, dtype=float)
        return POOLED_METRICS[metric](weights @ np.asarray(method, dtype=float), total) - POOLED_METRICS[metric](
            weights @ np.asarray(base, dtype=float), total)

    return _bootstrap(pairs, draw, rounds, seed, level)


def _bootstrap(pairs: Sequence[tuple], draw: Callable[..., np.ndarray], rounds: int, seed: int,
               level: float) -> tuple[float, float]:
    """The percentile interval of the mean over resampled seeds of ``draw(rng, *pair, size)``, each seed's draws."""
    rng = np.random.default_rng(seed)
    drawn = rng.integers(len(pairs), size=(rounds, len(pairs)))
    differences = np.zeros(drawn.shape)
    for index, pair in enumerate(pairs):
        where = drawn == index
        differences[where] = draw(rng, *pair, int(where.sum()))
    means, tail = differences.mean(axis=1), (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def _accuracy(confusion: np.ndarray, positive: Optional[int]) -> np.ndarray:
    return np.trace(confusion, axis1=1, axis2=2) / confusion.sum(axis=(1, 2))


def _binary_f1(confusion: np.ndarray, positive: Optional[int]) -> np.ndarray:
    """F1 of label 1 (0 without a true positive), as :func:`istar_plugin.metrics.binary_f1`."""
    if positive is None:
        return np.zeros(len(confusion))
    true_positive = confusion[:, positive, positive]
    wrong = confusion[:, positive, :].sum(axis=1) + confusion[:, :, positive].sum(axis=1) - 2 * true_positive
    return np.where(true_positive > 0, 2 * true_positive / np.maximum(2 * true_positive + wrong, 1), 0.0)


def _matthews(confusion: np.ndarray, positive: Optional[int]) -> np.ndarray:
    """Multi-class MCC (0 where undefined), as :func:`istar_plugin.metrics.matthews_correlation`."""
    total = confusion.sum(axis=(1, 2)).astype(float)
    correct = np.trace(confusion, axis1=1, axis2=2).astype(float)
    predicted, true = confusion.sum(axis=2).astype(float), confusion.sum(axis=1).astype(float)
    numerator = correct * total - (predicted * true).sum(axis=1)
    denominator = np.sqrt((total ** 2 - (predicted ** 2).sum(axis=1)) * (total ** 2 - (true ** 2).sum(axis=1)))
    return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), 0.0)


CONFUSION_METRICS: dict[str, Callable[[np.ndarray, Optional[int]], np.ndarray]] = {
    "accuracy": _accuracy, "f1": _binary_f1, "matthews_correlation": _matthews}
"""Metrics computed from a confusion matrix (axis 1: prediction, axis 2: reference), batched over its first axis."""

POOLED_METRICS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "perplexity": lambda nll, tokens: np.exp(nll / tokens), "nll_per_token": lambda nll, tokens: nll / tokens}
"""Language-model metrics pooled over texts, from the resampled texts' summed NLL and token count (batched)."""
