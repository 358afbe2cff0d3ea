"""Tables 1 and 2 of Rudman & Eickhoff (2024) from a grid's cells (:mod:`.istar_cells`); Figure 3 is :mod:`.istar_figure3`.

Every directory under GRID_DIR holding a ``config.yaml`` (the trainer's) or a ``cell.yaml`` (a grid cell's
snapshot, written at submission) is a cell; a finished cell also holds the trainer's ``results.json``. A cell
without a readable one (queued, running, crashed) is reported as missing or failed, never dropped. Scores are
percentages; a method's best setting is its lambda/zeta (and any other swept hyperparameter, its *variant*, e.g.
``optim.lr=1e-05``) with the highest mean score over seeds, selected on the evaluation split as in the paper.

    istar-report GRID_DIR [--out DIR]   # table1.md/.csv, table2.md/.csv, cells.csv, figure3.png in DIR
                                        # (+ table3.md/.csv for isolayer cells: istar_plugin.reports.isolayer_table3)

A run whose eval predictions were all one class is marked ``(k collapsed)``. A grid with isotropy-calibration
cells (CosReg on the embeddings, spectrum, flow) also gets Ding et al.'s Table 1 and Table 4 with the paper's
numbers beside ours (:mod:`istar_plugin.reports.calibration_tables`).

Table 1 is shown in the I-STAR paper's metrics (:mod:`istar_plugin.reports.paper.istar`; the CSV keeps every other metric
too), with its mean ± std and our difference beside each cell whose model, method, task and metric it reports.
``figure7.png`` (score against zeta) and ``figure8.png`` (I-STAR on one layer at a time) are drawn when the grid
holds such cells (:mod:`istar_plugin.reports.zeta_and_layer_figures`).

>>> import json, tempfile
>>> from pathlib import Path
>>> from istar_plugin.reports.istar_cells import collect
>>> grid = Path(tempfile.mkdtemp())
>>> for seed, accuracy in [(1, 0.90), (2, 0.92)]:
...     cell = grid / "sst2" / f"seed{seed}"
...     cell.mkdir(parents=True)
...     _ = (cell / "config.yaml").write_text("task: sst2\\n")
...     _ = (cell / "results.json").write_text(json.dumps({"task": "sst2", "model": "bert", "seed": seed,
...         "criterion": {"name": "cross_entropy"}, "main_metric": "accuracy", "metrics": {"accuracy": accuracy},
...         "eval_isoscore_star": 0.1}))
>>> _ = (grid / "sst2" / "seed3").mkdir(); _ = (grid / "sst2" / "seed3" / "config.yaml").write_text("task: sst2\\n")
>>> records, problems = collect(grid)
>>> [(row["Base"].mean, round(row["Base"].std, 4), row["Base"].n) for row in table1(records)]
[(91.0, 1.4142, 2)]
>>> [(Path(path).name, reason) for path, reason in problems]
[('seed3', 'no results.json (the run has not finished)')]
"""
from __future__ import annotations

import csv
import io
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from ..metrics import better_sign
from .istar_cells import Key, Record
from .paper.istar import paper_result, reported_metrics

__all__ = ["Setting", "SELECTIONS", "settings", "best_settings", "has_validation", "table1", "table2", "table1_markdown",
           "table2_markdown", "table1_csv_rows", "csv_text", "display_name", "method_order"]

METHOD_NAMES = {"cross_entropy": "Base", "cosreg": "CosReg", "istar": "I-STAR"}
"""Criterion name -> column title; other (plugin) criteria keep their own name, after these."""

@dataclass(frozen=True)
class Setting:
    """One hyperparameter setting of a method on a model x task, over its seeds (sample std, 0 for one seed)."""

    model: str
    task: str
    method: str
    lam: Optional[float]
    zeta: Optional[float]
    metric: str
    seeds: tuple[int, ...]
    scores: tuple[float, ...]
    isoscores: tuple[float, ...]
    variant: str = ""
    collapsed: int = 0  # how many of its seeds collapsed to one predicted class
    others: tuple[tuple[str, tuple[float, ...]], ...] = ()  # other metrics every seed has: name -> per-seed scores
    validations: tuple[Optional[float], ...] = ()  # per seed: best score on the held-out validation split, if any

    @property
    def validation_mean(self) -> Optional[float]:
        """Mean validation score over seeds; None unless every seed held a validation split out."""
        if not self.validations or any(v is None for v in self.validations):
            return None
        return statistics.fmean(self.validations)

    @property
    def n(self) -> int:
        return len(self.scores)

    def metric_scores(self, metric: str) -> Optional[tuple[float, ...]]:
        """Per-seed percentages of ``metric`` (the table metric or one of ``others``); None if not every seed has it."""
        return self.scores if metric == self.metric else dict(self.others).get(metric)

    def metric_names(self) -> list[str]:
        return [self.metric, *(name for name, _ in self.others)]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores)

    @property
    def std(self) -> float:
        return statistics.stdev(self.scores) if self.n > 1 else 0.0

    @property
    def isoscore_mean(self) -> float:
        return statistics.fmean(self.isoscores)

    @property
    def isoscore_std(self) -> float:
        return statistics.stdev(self.isoscores) if self.n > 1 else 0.0

# ------------------------------------------------------------------------------------------------ tables
def method_order(methods: Iterable[str]) -> list[str]:
    """Base, CosReg, I-STAR first, then any other criterion by name."""
    return sorted(set(methods), key=_method_rank)


def _method_rank(method: str) -> tuple[int, str]:
    known = list(METHOD_NAMES)
    return (known.index(method) if method in known else len(known), method)


def display_name(method: str) -> str:
    return METHOD_NAMES.get(method, method)


def settings(records: Sequence[Record]) -> list[Setting]:
    """Records grouped by model, task, method, lam, zeta and variant (seeds in ascending order)."""
    groups: dict[Key, list[Record]] = {}
    for record in records:
        key = (record.model, record.task, record.method, record.lam, record.zeta, record.variant)
        groups.setdefault(key, []).append(record)
    result = []
    for (model, task, method, lam, zeta, variant), group in groups.items():
        group.sort(key=lambda record: record.seed)
        metrics = {record.metric for record in group}
        if len(metrics) > 1:
            raise ValueError(f"{model}/{task}/{method}: cells disagree on the main metric ({', '.join(sorted(metrics))})")
        others = [dict(record.others) for record in group]
        common = [name for name in others[0] if all(name in other for other in others)]
        result.append(Setting(
            model, task, method, lam, zeta, metrics.pop(),
            seeds=tuple(record.seed for record in group),
            scores=tuple(record.score for record in group),
            isoscores=tuple(record.isoscore_star for record in group),
            variant=variant,
            collapsed=sum(record.collapsed for record in group),
            others=tuple((name, tuple(other[name] for other in others)) for name in common),
            validations=tuple(record.validation for record in group),
        ))
    return sorted(result, key=_setting_order)


def _setting_order(setting: Setting) -> tuple:
    none_first = lambda value: (value is not None, value or 0.0)  # noqa: E731
    return (setting.model, setting.task, _method_rank(setting.method), none_first(setting.lam), none_first(setting.zeta),
            setting.variant)


SELECTIONS = {
    "eval": "each method's best setting by its mean over seeds on the evaluation split, as the paper selects: "
            "the score is optimistic (chosen and reported on the same examples)",
    "validation": "each method's best setting by its mean over seeds on the validation split held out of the "
                  "training set (data.validation_split); the evaluation split is scored once, after the choice",
}
"""How a table's settings were selected -> the caption line saying so."""


def best_settings(records: Sequence[Record], selection: str = "eval") -> dict[Key, tuple[Setting, int]]:
    """(model, task, method) -> (its setting with the best mean score, how many settings were compared): the highest,
    or the lowest for a perplexity.

    ``selection="validation"`` compares the mean held-out validation score instead, among settings whose every
    seed has one. Ties go to the setting with more seeds, then to the first in lam/zeta/variant order.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"selection {selection!r} unknown; choose one of: {', '.join(SELECTIONS)}")
    candidates: dict[Key, list[Setting]] = {}
    for setting in settings(records):
        if selection == "eval" or setting.validation_mean is not None:
            candidates.setdefault((setting.model, setting.task, setting.method), []).append(setting)
    by = (lambda s: (better_sign(s.metric) * s.mean, s.n)) if selection == "eval" else (
        lambda s: (better_sign(s.metric) * s.validation_mean, s.n))
    return {key: (max(group, key=by), len(group)) for key, group in candidates.items()}


def has_validation(records: Sequence[Record]) -> bool:
    """Whether some setting's every seed scored a held-out validation split (a held-out selection is possible)."""
    return any(setting.validation_mean is not None for setting in settings(records))


def table1(records: Sequence[Record], selection: str = "eval") -> list[dict[str, Any]]:
    """Rows model x task: ``model``, ``task``, ``metric`` and per method column title its best
    :class:`Setting` (None where the method did not run), selected as ``selection`` (:data:`SELECTIONS`)."""
    best = best_settings(records, selection)
    columns = [display_name(method) for method in method_order(key[2] for key in best)]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for (model, task, method), (setting, _) in sorted(best.items(), key=lambda item: _setting_order(item[1][0])):
        row = rows.setdefault((model, task), {"model": model, "task": task, "metric": setting.metric,
                                               **dict.fromkeys(columns)})
        row[display_name(method)] = setting
    return list(rows.values())


def table2(records: Sequence[Record]) -> list[dict[str, Any]]:
    """The selected hyperparameters: one row per model x task x method that has a lam, zeta or variant to choose."""
    rows = []
    for (model, task, method), (setting, compared) in sorted(best_settings(records).items(),
                                                             key=lambda item: _setting_order(item[1][0])):
        if setting.lam is None and setting.zeta is None and not setting.variant:
            continue
        rows.append({"model": model, "task": task, "method": display_name(method), "lam": setting.lam,
                     "zeta": setting.zeta, "variant": setting.variant, "mean": setting.mean, "std": setting.std, "n": setting.n,
                     "settings_compared": compared})
    return rows


def method_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The method column titles of :func:`table1` rows."""
    return [key for key in rows[0] if key not in ("model", "task", "metric")] if rows else []


def metric_summary(setting: Optional[Setting], metric: str) -> Optional[tuple[float, float, int]]:
    """``(mean, sample std, n)`` of ``metric`` over the setting's seeds; None where it has no such metric."""
    scores = None if setting is None else setting.metric_scores(metric)
    if not scores:
        return None
    return statistics.fmean(scores), statistics.stdev(scores) if len(scores) > 1 else 0.0, len(scores)


def paper_comparison(setting: Optional[Setting], metric: str, paper_model: Optional[str] = None
                     ) -> Optional[tuple[float, float, float, str]]:
    """``(paper mean, paper std, ours - paper, paper model)`` where the paper's Table 1 has this model, method, task
    and metric; for a model the paper did not run (MiniLM), the paper's ``paper_model`` (``bert``) if given."""
    ours = metric_summary(setting, metric)
    if ours is None or setting is None:
        return None
    for model in (setting.model, paper_model):
        paper = None if model is None else paper_result(model, setting.method, setting.task, metric)
        if paper is not None:
            return paper[0], paper[1], ours[0] - paper[0], model
    return None


def format_score(setting: Optional[Setting], most_seeds: int, metric: Optional[str] = None,
                 paper_model: Optional[str] = None) -> str:
    """``mean ± std`` of ``metric`` (default the table metric), marked ``(n=k)`` when fewer seeds than the grid's
    most, or only one, went in, and ``(k collapsed)`` when k of its runs predicted one class for every example;
    followed by the paper's ``mean ± std`` and our difference where it has the cell.

    >>> format_score(Setting("minilm", "sst2", "istar", -1.0, 0.2, "accuracy", (1,), (92.5,), (0.1,)), 1)
    '92.50 ± 0.00 (n=1)'
    >>> format_score(Setting("bert", "mrpc", "spectrum", None, None, "f1", (1, 2), (81.2, 81.2), (0.1, 0.1), collapsed=2), 2)
    '81.20 ± 0.00 (2 collapsed)'
    >>> format_score(Setting("bert", "sst2", "istar", -5.0, 0.2, "accuracy", (1, 2), (92.5, 93.5), (0.1, 0.1)), 2)
    '93.00 ± 0.71 · paper 92.65 ± 0.18 (+0.35)'
    >>> format_score(Setting("minilm", "rte", "istar", -1.0, 0.8, "accuracy", (1, 2), (60.0, 62.0), (0.1, 0.1)), 2, paper_model="bert")
    '61.00 ± 1.41 · paper bert 62.53 ± 0.70 (-1.53)'
    """
    summary = metric_summary(setting, metric or (setting.metric if setting else ""))
    if summary is None:
        return "—"
    mean, std, n = summary
    text = f"{mean:.2f} ± {std:.2f}" + (f" (n={n})" if n == 1 or n < most_seeds else "")
    text += f" ({setting.collapsed} collapsed)" if setting.collapsed else ""
    paper = paper_comparison(setting, metric or setting.metric, paper_model)
    if paper is None:
        return text
    named = "" if paper[3] == setting.model else f"{paper[3]} "
    return text + f" · paper {named}{paper[0]:.2f} ± {paper[1]:.2f} ({paper[2]:+.2f})"


def row_metrics(row: dict[str, Any], everything: bool = False) -> list[str]:
    """The metrics a Table 1 row is shown in: the paper's for its task (those some method has), and with
    ``everything`` every other metric the methods' cells report too (for the CSV)."""
    settings_ = [row[column] for column in method_columns([row]) if row[column] is not None]
    available = [name for setting in settings_ for name in setting.metric_names()]
    reported = [name for name in reported_metrics(row["task"], row["metric"]) if name in available]
    others = sorted(set(available) - set(reported)) if everything else []
    return reported + others


def table1_markdown(rows: Sequence[dict[str, Any]], versus_base: Callable[[Setting], Any] = lambda setting: None,
                    paper_model: Optional[str] = None) -> str:
    """Table 1 as a markdown table, one line per reported metric; the best mean in each line in bold when
    methods compete; the paper's mean ± std and our difference beside each cell it has; and, in the table metric,
    ``Δ`` to Base with its interval and verdict where ``versus_base(setting)`` gives one
    (:func:`istar_plugin.reports.versus_base.comparison_of`). ``paper_model``: whose paper numbers stand beside a
    model the paper did not run."""
    columns = method_columns(rows)
    most_seeds = max((s.n for row in rows for s in map(row.get, columns) if s), default=0)
    lines = ["| Model | Task | Metric | " + " | ".join(columns) + " |", "|---" * (3 + len(columns)) + "|"]
    for row in rows:
        for metric in row_metrics(row):
            summaries = {column: metric_summary(row[column], metric) for column in columns}
            present = [summary[0] for summary in summaries.values() if summary]
            cells = []
            for column in columns:
                text = format_score(row[column], most_seeds, metric, paper_model)
                paired = versus_base(row[column]) if row[column] is not None and metric == row[column].metric else None
                text += f" · Δ {paired.text()}" if paired is not None else ""
                best = max(present) if better_sign(metric) > 0 else min(present)
                bold = len(present) > 1 and summaries[column] is not None and summaries[column][0] == best
                cells.append(f"**{text}**" if bold else text)
            lines.append(f"| {row['model']} | {row['task']} | {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table1_csv_rows(rows: Sequence[dict[str, Any]], paper_model: Optional[str] = None) -> list[dict[str, Any]]:
    """Table 1 flattened, one row per metric (``reported``: the paper's Table 1 shows it): per method
    ``<Method> mean``, ``std``, ``n``, ``lam``, ``zeta``, ``variant``, ``paper mean``, ``paper std``, ``difference``,
    ``paper model`` (the model whose paper numbers those are)."""
    flat = []
    for row in rows:
        reported = row_metrics(row)
        for metric in row_metrics(row, everything=True):
            out = {"model": row["model"], "task": row["task"], "metric": metric, "reported": metric in reported}
            for column in method_columns(rows):
                setting = row[column]
                summary = metric_summary(setting, metric)
                paper = paper_comparison(setting, metric, paper_model)
                values = {"mean": summary and summary[0], "std": summary and summary[1], "n": summary and summary[2],
                          **{name: None if setting is None else getattr(setting, name) for name in ("lam", "zeta", "variant")},
                          "paper mean": paper and paper[0], "paper std": paper and paper[1], "difference": paper and paper[2],
                          "paper model": paper and paper[3]}
                out.update({f"{column} {name}": value for name, value in values.items()})
            flat.append(out)
    return flat


def table2_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Table 2 as markdown; an ``other`` column (the selected variant) appears when anything else was swept."""
    other = any(row["variant"] for row in rows)
    titles = ["Model", "Task", "Method", "λ", "ζ", *(["other"] if other else []), "mean ± std", "settings compared"]
    lines = ["| " + " | ".join(titles) + " |", "|---" * len(titles) + "|"]
    for row in rows:
        cells = [row["model"], row["task"], row["method"], _number_text(row["lam"]), _number_text(row["zeta"]),
                 *([row["variant"] or "—"] if other else []), f"{row['mean']:.2f} ± {row['std']:.2f}",
                 str(row["settings_compared"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _number_text(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:g}"


def csv_text(rows: Sequence[dict[str, Any]], columns: Optional[Sequence[str]] = None) -> str:
    """Rows as CSV text: None as an empty field, floats to 10 decimals (no 90.40000000000002)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns or (rows[0] if rows else [])), lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: _csv_value(value) for key, value in row.items()} for row in rows)
    return buffer.getvalue()


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    return round(value, 10) if isinstance(value, float) else value
