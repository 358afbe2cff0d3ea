"""``istar-report GRID_DIR``: Tables 1 and 2 and Figure 3 of Rudman & Eickhoff (2024) from a grid of runs.

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
[('seed3', 'no results.json (not finished, or failed)')]
"""
from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import yaml

from ..storage.atomic import atomic_write_bytes
from .paper.istar import paper_result, reported_metrics

__all__ = ["Record", "Setting", "collect", "settings", "best_settings", "table1", "table2", "figure3_points",
           "figure3", "main"]

METHOD_NAMES = {"cross_entropy": "Base", "cosreg": "CosReg", "istar": "I-STAR"}
"""Criterion name -> column title; other (plugin) criteria keep their own name, after these."""

ALREADY_PERCENT = {"squad": frozenset({"exact_match", "f1"})}
"""Task -> metrics stored as percentages; every other metric is a fraction in [0, 1] and is shown x100."""

Key = tuple  # (model, task, method) or (model, task, method, lam, zeta, variant)

CELL_FILES = ("config.yaml", "cell.yaml")
"""A directory holding either is a cell: the trainer's resolved config, or the grid's snapshot of a queued cell."""

NOT_A_SETTING = frozenset({"seed", "output_dir", "criterion.lam", "criterion.zeta", "progress", "tensorboard",
                           "log_every", "eval_every", "save_every", "device", "init_from"})
"""Config keys that never make two cells different settings: the seed (averaged over), lam and zeta (columns
of their own), how a run was placed and logged, and ``init_from`` (a second stage starts from its own seed's run)."""


@dataclass(frozen=True)
class Record:
    """One finished cell: ``value`` is its table metric as stored (the paper's for the task, see
    :mod:`istar_plugin.reports.paper.istar`; else the task's main metric), ``score`` the same as a percentage, ``others`` every
    other task metric as a percentage, ``layers`` the I-STAR penalty's layers (None: all)."""

    task: str
    model: str
    method: str
    lam: Optional[float]
    zeta: Optional[float]
    seed: int
    metric: str
    value: float
    score: float
    isoscore_star: float
    path: str
    variant: str = ""
    collapsed: bool = False  # the eval predictions were all one class (or one value)
    others: tuple[tuple[str, float], ...] = ()
    layers: Optional[tuple[int, ...]] = None


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


class CellProblem(Exception):
    """Why a cell gives no record; the message is the reason listed in the report."""


# ----------------------------------------------------------------------------------------------- collecting
def as_percent(task: str, metric: str, value: float) -> float:
    """``value`` as a percentage: SQuAD's metrics already are, all others are fractions.

    >>> as_percent("cola", "matthews_correlation", 0.5), as_percent("squad", "f1", 88.5)
    (50.0, 88.5)
    """
    return value if metric in ALREADY_PERCENT.get(task, ()) else 100.0 * value


def collect(grid_dir: str | os.PathLike) -> tuple[list[Record], list[tuple[str, str]]]:
    """One record per finished cell under ``grid_dir`` and ``(path, reason)`` for every other cell.

    Each record's ``variant`` names the config keys (beyond lam, zeta and the seed) on which cells of its
    model, task and method differ, e.g. a learning-rate sweep. A second cell with the same model, task,
    method, lam, zeta, variant and seed as an earlier one (in path order) is a problem too: averaging both
    would count one seed twice.
    """
    grid = Path(grid_dir)
    if not grid.is_dir():
        raise NotADirectoryError(f"grid directory {str(grid)!r} does not exist or is not a directory")
    finished: list[tuple[Record, dict[str, Any]]] = []
    problems: list[tuple[str, str]] = []
    for cell in find_cells(grid):
        try:
            finished.append((read_cell(cell), read_config(cell)))
        except CellProblem as problem:
            problems.append((str(cell), str(problem)))
    records: list[Record] = []
    first_of: dict[Key, Record] = {}
    for record in with_variants(finished):
        key = (record.model, record.task, record.method, record.lam, record.zeta, record.variant, record.seed)
        if key in first_of:
            reason = f"duplicate of {first_of[key].path} (same model/task/method/lam/zeta/seed and config); left out"
            problems.append((record.path, reason))
            continue
        first_of[key] = record
        records.append(record)
    return records, problems


def find_cells(grid: Path) -> list[Path]:
    """Every directory under ``grid`` (itself included) holding a ``config.yaml`` or ``cell.yaml``, in path order."""
    cells = [Path(root) for root, _, files in os.walk(grid) if any(name in files for name in CELL_FILES)]
    return sorted(cells, key=lambda path: path.parts)


def read_config(cell: Path) -> dict[str, Any]:
    """The cell's resolved ``config.yaml`` as flat ``dotted.key -> value`` pairs.

    >>> import tempfile
    >>> cell = Path(tempfile.mkdtemp()); _ = (cell / "config.yaml").write_text("optim: {lr: 1.0e-05}\\nseed: 3\\n")
    >>> read_config(cell)
    {'optim.lr': 1e-05, 'seed': 3}
    """
    try:
        config = yaml.safe_load((cell / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise CellProblem(f"unreadable config.yaml beside results.json: {error}") from None
    return _flatten(config if isinstance(config, dict) else {})


def _flatten(node: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def with_variants(finished: Sequence[tuple[Record, dict[str, Any]]]) -> list[Record]:
    """Each record with its ``variant``: ``key=value`` for every setting key whose value differs between the
    cells of the same model, task and method ("" when nothing but lam, zeta and the seed was swept)."""
    groups: dict[Key, list[dict[str, Any]]] = {}
    for record, config in finished:
        groups.setdefault((record.model, record.task, record.method), []).append(config)
    swept: dict[Key, list[str]] = {}
    for key, configs in groups.items():
        names = sorted({name for config in configs for name in config} - NOT_A_SETTING)
        swept[key] = [name for name in names if len({repr(config.get(name)) for config in configs}) > 1]
    return [
        replace(record, variant=" ".join(f"{name}={config.get(name)}"
                                         for name in swept[record.model, record.task, record.method]))
        for record, config in finished
    ]


def read_cell(cell: Path) -> Record:
    """The record of a finished cell; raises :class:`CellProblem` saying why there is none."""
    path = cell / "results.json"
    if not path.is_file():
        raise CellProblem("no results.json (not finished, or failed)" + _failure_hints(cell))
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CellProblem(f"unreadable results.json: {error}") from None
    if not isinstance(results, dict):
        raise CellProblem(f"results.json holds a {type(results).__name__}, not an object")
    if results.get("status") == "failed":
        raise CellProblem(f"failed: {results.get('reason', 'no reason recorded')}")
    criterion = _field(results, "criterion", dict)
    task = _field(results, "task", str)
    metric = reported_metrics(task, _field(results, "main_metric", str))[0]
    metrics = results.get("metrics") if isinstance(results.get("metrics"), dict) else {}
    value = _number(metrics.get(metric, results.get(metric)), f"metric {metric!r}")
    return Record(
        task=task,
        model=_field(results, "model", str),
        method=_field(criterion, "name", str, "criterion.name"),
        lam=_optional_number(criterion.get("lam"), "criterion.lam"),
        zeta=_optional_number(criterion.get("zeta"), "criterion.zeta"),
        seed=_field(results, "seed", int),
        metric=metric,
        value=value,
        score=as_percent(task, metric, value),
        isoscore_star=_number(results.get("eval_isoscore_star"), "eval_isoscore_star"),
        path=str(cell),
        collapsed=results.get("collapsed") is True,
        others=tuple(sorted((name, as_percent(task, name, float(number))) for name, number in metrics.items()
                            if name != metric and not name.startswith("eval_") and _finite(number))),
        layers=_layers(criterion.get("layers")),
    )


def _finite(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _layers(value: Any) -> Optional[tuple[int, ...]]:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise CellProblem(f"results.json: criterion.layers should be a list of integers or null, is {value!r}")
    return tuple(value)


def _field(mapping: dict, key: str, kind: type, label: Optional[str] = None) -> Any:
    value = mapping.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        found = "missing" if value is None else f"a {type(value).__name__} ({value!r})"
        raise CellProblem(f"results.json: {label or key} should be a {kind.__name__}, is {found}")
    return value


def _number(value: Any, label: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise CellProblem(f"results.json: {label} should be a number, is {'missing' if value is None else repr(value)}")
    if not math.isfinite(value):
        raise CellProblem(f"results.json: {label} is {value}")
    return float(value)


def _optional_number(value: Any, label: str) -> Optional[float]:
    return None if value is None else _number(value, label)


def _failure_hints(cell: Path) -> str:
    """Where to look next: the newest checkpoint (an interrupted or running job) and the newest stderr log."""
    hints = []
    checkpoints = sorted((cell / "checkpoints").glob("step_*.pt"))
    if checkpoints:
        hints.append(f"last checkpoint {checkpoints[-1].name}")
    logs = sorted(cell.rglob("*.err"), key=lambda log: log.stat().st_mtime)
    if logs:
        last_line = _last_line(logs[-1])
        hints.append(f"log {logs[-1]}" + (f": {last_line}" if last_line else ""))
    return "".join(f"; {hint}" for hint in hints)


def _last_line(path: Path, limit: int = 200) -> str:
    """The last non-blank line of a text file (progress bars' carriage returns count as line ends)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 8192))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.replace("\r", "\n").split("\n") if line.strip()]
    return lines[-1][:limit] if lines else ""


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
        ))
    return sorted(result, key=_setting_order)


def _setting_order(setting: Setting) -> tuple:
    none_first = lambda value: (value is not None, value or 0.0)  # noqa: E731
    return (setting.model, setting.task, _method_rank(setting.method), none_first(setting.lam), none_first(setting.zeta),
            setting.variant)


def best_settings(records: Sequence[Record]) -> dict[Key, tuple[Setting, int]]:
    """(model, task, method) -> (its setting with the highest mean score, how many settings were compared).

    Ties go to the setting with more seeds, then to the first in lam/zeta/variant order.
    """
    candidates: dict[Key, list[Setting]] = {}
    for setting in settings(records):
        candidates.setdefault((setting.model, setting.task, setting.method), []).append(setting)
    return {key: (max(group, key=lambda s: (s.mean, s.n)), len(group)) for key, group in candidates.items()}


def table1(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Rows model x task: ``model``, ``task``, ``metric`` and per method column title its best
    :class:`Setting` (None where the method did not run)."""
    best = best_settings(records)
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


def paper_comparison(setting: Optional[Setting], metric: str) -> Optional[tuple[float, float, float]]:
    """``(paper mean, paper std, ours - paper)`` where the paper's Table 1 has this model, method, task and metric."""
    ours = metric_summary(setting, metric)
    paper = None if setting is None else paper_result(setting.model, setting.method, setting.task, metric)
    if ours is None or paper is None:
        return None
    return paper[0], paper[1], ours[0] - paper[0]


def format_score(setting: Optional[Setting], most_seeds: int, metric: Optional[str] = None) -> str:
    """``mean ± std`` of ``metric`` (default the table metric), marked ``(n=k)`` when fewer seeds than the grid's
    most, or only one, went in, and ``(k collapsed)`` when k of its runs predicted one class for every example;
    followed by the paper's ``mean ± std`` and our difference where it has the cell.

    >>> format_score(Setting("minilm", "sst2", "istar", -1.0, 0.2, "accuracy", (1,), (92.5,), (0.1,)), 1)
    '92.50 ± 0.00 (n=1)'
    >>> format_score(Setting("bert", "mrpc", "spectrum", None, None, "f1", (1, 2), (81.2, 81.2), (0.1, 0.1), collapsed=2), 2)
    '81.20 ± 0.00 (2 collapsed)'
    >>> format_score(Setting("bert", "sst2", "istar", -5.0, 0.2, "accuracy", (1, 2), (92.5, 93.5), (0.1, 0.1)), 2)
    '93.00 ± 0.71 · paper 92.65 ± 0.18 (+0.35)'
    """
    summary = metric_summary(setting, metric or (setting.metric if setting else ""))
    if summary is None:
        return "—"
    mean, std, n = summary
    text = f"{mean:.2f} ± {std:.2f}" + (f" (n={n})" if n == 1 or n < most_seeds else "")
    text += f" ({setting.collapsed} collapsed)" if setting.collapsed else ""
    paper = paper_comparison(setting, metric or setting.metric)
    return text + (f" · paper {paper[0]:.2f} ± {paper[1]:.2f} ({paper[2]:+.2f})" if paper else "")


def row_metrics(row: dict[str, Any], everything: bool = False) -> list[str]:
    """The metrics a Table 1 row is shown in: the paper's for its task (those some method has), and with
    ``everything`` every other metric the methods' cells report too (for the CSV)."""
    settings_ = [row[column] for column in method_columns([row]) if row[column] is not None]
    available = [name for setting in settings_ for name in setting.metric_names()]
    reported = [name for name in reported_metrics(row["task"], row["metric"]) if name in available]
    others = sorted(set(available) - set(reported)) if everything else []
    return reported + others


def table1_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Table 1 as a markdown table, one line per reported metric; the best mean in each line in bold when
    methods compete; the paper's mean ± std and our difference beside each cell it has."""
    columns = method_columns(rows)
    most_seeds = max((s.n for row in rows for s in map(row.get, columns) if s), default=0)
    lines = ["| Model | Task | Metric | " + " | ".join(columns) + " |", "|---" * (3 + len(columns)) + "|"]
    for row in rows:
        for metric in row_metrics(row):
            summaries = {column: metric_summary(row[column], metric) for column in columns}
            present = [summary[0] for summary in summaries.values() if summary]
            cells = []
            for column in columns:
                text = format_score(row[column], most_seeds, metric)
                bold = len(present) > 1 and summaries[column] is not None and summaries[column][0] == max(present)
                cells.append(f"**{text}**" if bold else text)
            lines.append(f"| {row['model']} | {row['task']} | {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table1_csv_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table 1 flattened, one row per metric (``reported``: the paper's Table 1 shows it): per method
    ``<Method> mean``, ``std``, ``n``, ``lam``, ``zeta``, ``variant``, ``paper mean``, ``paper std``, ``difference``."""
    flat = []
    for row in rows:
        reported = row_metrics(row)
        for metric in row_metrics(row, everything=True):
            out = {"model": row["model"], "task": row["task"], "metric": metric, "reported": metric in reported}
            for column in method_columns(rows):
                setting = row[column]
                summary = metric_summary(setting, metric)
                paper = paper_comparison(setting, metric)
                values = {"mean": summary and summary[0], "std": summary and summary[1], "n": summary and summary[2],
                          **{name: None if setting is None else getattr(setting, name) for name in ("lam", "zeta", "variant")},
                          "paper mean": paper and paper[0], "paper std": paper and paper[1], "difference": paper and paper[2]}
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


# ------------------------------------------------------------------------------------------------ figure 3
def figure3_points(records: Sequence[Record]) -> dict[str, dict[str, list[tuple[float, Setting]]]]:
    """task -> model -> [(lambda, setting)] in lambda order: every I-STAR lambda (at its best zeta and variant
    when several were run) and cross_entropy (its best variant) as lambda 0 unless I-STAR ran lambda 0 itself."""
    best: dict[tuple[str, str, str, float], Setting] = {}  # (task, model, method, lambda) -> best setting
    for setting in settings(records):
        lam = setting.lam if setting.method == "istar" else 0.0 if setting.method == "cross_entropy" else None
        key = (setting.task, setting.model, setting.method, lam)
        if lam is not None and (key not in best or setting.mean > best[key].mean):
            best[key] = setting
    per_lambda = {(task, model, lam): setting for (task, model, method, lam), setting
                  in sorted(best.items(), key=lambda item: item[0][2] == "istar")}  # I-STAR's own lambda 0 wins
    points: dict[str, dict[str, list[tuple[float, Setting]]]] = {}
    for (task, model, lam), setting in sorted(per_lambda.items()):
        points.setdefault(task, {}).setdefault(model, []).append((lam, setting))
    return points


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def figure3(records: Sequence[Record], path: str | os.PathLike) -> Path:
    """Figure 3: per task a panel of eval IsoScore* (x) against score (y), one point per lambda and model,
    error bars one std over seeds on both axes, each point labelled with its lambda; written as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = figure3_points(records)
    if not points:
        raise ValueError("figure 3 needs I-STAR or cross_entropy cells; none were given")
    models = sorted({model for per_model in points.values() for model in per_model})
    colours = {model: plt.cm.tab10(i % 10) for i, model in enumerate(models)}
    markers = {model: MARKERS[i % len(MARKERS)] for i, model in enumerate(models)}
    columns = min(3, len(points))
    rows = math.ceil(len(points) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(max(6.0, 0.6 + 4.6 * columns), 1.3 + 3.7 * rows), dpi=130,
                             squeeze=False, layout="constrained")
    for ax in axes.flat[len(points):]:
        ax.set_visible(False)
    metric_of = {record.task: record.metric for record in records}
    for ax, (task, per_model) in zip(axes.flat, points.items()):
        for model, series in per_model.items():
            _plot_series(ax, series, colours[model], markers[model], model)
        ax.set_title(f"{task} ({metric_of[task]})", fontsize=11)
        ax.set_xlabel("eval IsoScore*", fontsize=9)
        ax.set_ylabel(f"{metric_of[task]} (%)", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(True, alpha=0.3)
        ax.margins(0.15)
    handles = [plt.Line2D([], [], color=colours[m], marker=markers[m], linestyle="-", label=m) for m in models]
    fig.suptitle("Task performance vs eval IsoScore*, one point per I-STAR λ (labels; λ = 0 is Base)\n"
                 "mean ± std over seeds on both axes", fontsize=10)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(models), 6), fontsize=9, frameon=False)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def _plot_series(ax, series: list[tuple[float, Setting]], colour, marker: str, model: str) -> None:
    xs = [setting.isoscore_mean for _, setting in series]
    ys = [setting.mean for _, setting in series]
    ax.plot(xs, ys, color=colour, linewidth=0.8, alpha=0.5)
    ax.errorbar(xs, ys, xerr=[s.isoscore_std for _, s in series], yerr=[s.std for _, s in series], fmt="none",
                ecolor=colour, elinewidth=0.9, capsize=2.5, alpha=0.8)
    ax.plot(xs, ys, linestyle="none", marker=marker, color=colour, markersize=5.5, markeredgecolor="white",
            markeredgewidth=0.6, zorder=3, label=model)
    for lam, x, y in zip((lam for lam, _ in series), xs, ys):
        ax.annotate(f"{lam:g}", (x, y), xytext=(5, 4), textcoords="offset points", fontsize=8, color=colour,
                    fontweight="bold", zorder=4, bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.75))
