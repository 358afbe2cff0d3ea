"""A grid's cells (or an archive's) and the :class:`Record` each finished one gives the tables, or why it gives none."""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from ... import metrics as task_metrics
from ...config import as_configured_today
from ...errors import ConfigError, DataError, RunDirError
from ...storage.logs import flat_keys
from ...storage.predictions import PREDICTIONS, Predictions, read_predictions
from ...storage.reading import cannot_read, read_bytes
from ...storage.results import (FROM_FINAL_EVALUATION, RESULTS, ResultsError, ResultsRecord, read_results,
                               recorded_precision)
from ..paper.istar import reported_metrics
from .run_extras import failure_hints, finite_number, wall_time

SHOWN_AS_STORED = {"squad": frozenset({"exact_match", "f1"}), "lm": frozenset({"perplexity", "nll_per_token"})}
"""Task -> metrics shown as stored; every other metric is a fraction in [0, 1] and is shown x100."""

Key = tuple  # (model, task, method) or (model, task, method, lam, zeta, variant)
RECORD_FILES = ("config.yaml", "results.json", "predictions.json", "attempts.jsonl", "metrics.jsonl")
"""All the reports read of a finished cell; an archive keeps exactly these."""

METRIC_RANGES = {"accuracy": (0.0, 1.0), "f1": (0.0, 1.0), "matthews_correlation": (-1.0, 1.0),
                 "pearson": (-1.0, 1.0), "spearman": (-1.0, 1.0), "combined_score": (-1.0, 1.0),
                 "perplexity": (1.0, math.inf), "nll_per_token": (0.0, math.inf), "eval_isoscore_star": (0.0, 1.0)}
"""The values a metric can take as stored (SQuAD's are percentages: 0 to 100); a value outside is no result."""

NOT_A_SETTING = frozenset({"seed", "output_dir", "criterion.lam", "criterion.zeta", "progress", "tensorboard",
                           "log_every", "eval_every", "save_every", "device", "init_from"})
"""Config keys that never make two cells different settings."""


@dataclass(frozen=True)
class Record:
    """One finished cell: ``value`` its table metric as stored, ``score`` the same as a percentage."""

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
    validation: Optional[float] = None  # best score on data.validation_split (percent; early stopping's), if held out
    seconds: Optional[float] = None  # the cell's wall time, start to finish
    unchecked: str = ""  # why its metrics were not recomputed from its predictions.json ("" when they were)


@dataclass(frozen=True)
class CellFiles:
    """What :func:`collect_files` read of a finished cell beyond its :class:`Record`: its ``results.json``, its
    ``predictions.json`` (None: it has none) and why its wall time is not its ``attempts.jsonl``'s (``""``: it is, or
    it has none)."""

    results: ResultsRecord
    predictions: Optional[Predictions]
    wall_time: str = ""


class CellProblem(Exception):
    """Why a cell gives no record; the message is the reason listed in the report."""


def as_percent(task: str, metric: str, value: float) -> float:
    """``value`` as a percentage: SQuAD's metrics already are, a perplexity stays one.

    >>> as_percent("cola", "accuracy", 0.5), as_percent("squad", "f1", 88.5), as_percent("lm", "perplexity", 2)
    (50.0, 88.5, 2)
    """
    return value if metric in SHOWN_AS_STORED.get(task, ()) else 100.0 * value


def collect(*grid_dirs: str | os.PathLike) -> tuple[list[Record], list[tuple[str, str]]]:
    """One record per finished cell under the ``grid_dirs`` (one grid), and ``(path, reason)`` for every other cell."""
    records, problems, _ = collect_files(*grid_dirs)
    return records, problems


def collect_files(*grid_dirs: str | os.PathLike
                  ) -> tuple[list[Record], list[tuple[str, str]], dict[str, CellFiles]]:
    """:func:`collect`'s records and problems, and what it read of each finished cell (by the cell's path)."""
    grids = grid_directories(*grid_dirs)
    finished: list[tuple[Record, dict[str, Any]]] = []
    problems: list[tuple[str, str]] = []
    files: dict[str, CellFiles] = {}
    for cell in (cell for grid in grids for cell in find_cells(grid)):
        try:
            record, config, files[str(cell)] = configured_cell(cell)
            finished.append((record, config))
        except CellProblem as problem:
            problems.append((str(cell), str(problem)))
    first_of: dict[Key, Record] = {}
    for record in with_variants(finished):
        key = (record.model, record.task, record.method, record.lam, record.zeta, record.variant, record.seed)
        first = first_of.setdefault(key, record)
        if first is not record:
            problems.append((record.path, f"duplicate of {first.path} (same model/task/method/lam/zeta/seed and "
                                          "config); left out"))
    return list(first_of.values()), problems, files


def grid_directories(*grid_dirs: str | os.PathLike) -> list[Path]:
    """The ``grid_dirs`` as paths; ConfigError naming the first that is not a directory."""
    grids = [Path(grid_dir) for grid_dir in grid_dirs]
    for grid in grids:
        if not grid.is_dir():
            raise ConfigError(f"grid directory {str(grid)!r} does not exist or is not a directory")
    return grids


def find_cells(grid: Path) -> list[Path]:
    """Every directory under ``grid`` (itself included) holding a ``config.yaml`` or ``cell.yaml``, in path order."""
    cells = [Path(root) for root, _, files in os.walk(grid, onerror=_unlisted)
             if "config.yaml" in files or "cell.yaml" in files]
    return sorted(cells, key=lambda path: path.parts)


def _unlisted(error: OSError) -> None:
    raise RunDirError(cannot_read(error.filename, "grid folder", error))


def read_config(cell: Path) -> dict[str, Any]:
    """The cell's resolved ``config.yaml`` as flat ``dotted.key -> value`` pairs."""
    try:
        config = yaml.safe_load(read_bytes(cell / "config.yaml", "run record", RunDirError))
    except (OSError, yaml.YAMLError) as error:
        raise CellProblem(f"unreadable config.yaml beside results.json: {error}") from None
    return flat_keys(config if isinstance(config, dict) else {})


def check_against_config(record: Record, config: dict[str, Any]) -> None:
    """Raise :class:`CellProblem` when ``results.json`` names another task, seed, model or criterion than ``config``."""
    recorded = {"task": record.task, "seed": record.seed, "model.name": record.model, "criterion.name": record.method,
                "criterion.lam": record.lam, "criterion.zeta": record.zeta}
    for key, value in recorded.items():
        if key in config and config[key] != value:
            raise CellProblem(f"results.json says {key} {value!r}, its config.yaml {key} {config[key]!r} (one of them "
                              "was edited, or copied from another run); left out")


def as_computed(config: dict[str, Any]) -> dict[str, Any]:
    """A flat config from before ``model.padding_free``: ``auto`` beside ``criterion.padding=include``, as it ran."""
    if "model.padding_free" not in config and config.get("criterion.padding") == "include":
        return {**config, "model.padding_free": "auto"}
    return config


def with_variants(finished: Sequence[tuple[Record, dict[str, Any]]]) -> list[Record]:
    """Each record with its ``variant``: ``key=value`` per setting key that differs within its model/task/method."""
    groups: dict[Key, list[dict[str, Any]]] = {}
    for record, config in finished:
        groups.setdefault((record.model, record.task, record.method), []).append(config)
    swept = {key: [name for name in sorted({name for config in configs for name in config} - NOT_A_SETTING)
                   if len({repr(config.get(name)) for config in configs}) > 1] for key, configs in groups.items()}
    return [replace(record, variant=" ".join(f"{name}={_as_written(config.get(name))}"
                                             for name in swept[record.model, record.task, record.method]))
            for record, config in finished]


def _as_written(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def read_cell(cell: Path) -> Record:
    """The record of a finished cell, checked against its config and predictions; else :class:`CellProblem`."""
    return configured_cell(cell)[0]


def configured_cell(cell: Path) -> tuple[Record, dict[str, Any], CellFiles]:
    """:func:`read_cell`'s record, the cell's flat config as written today and its files, each file read once."""
    try:
        results = read_results(cell / RESULTS, require_finished=True)
        record = cell_record(results, cell)
    except ResultsError as error:
        raise CellProblem(error.problem + (failure_hints(cell) if error.missing else "")) from None
    config = read_config(cell)
    check_against_config(record, config)
    unchecked, predictions = check_predictions(results, cell)
    seconds, timing = wall_time(cell)
    configured = as_configured_today(as_computed(config), recorded_precision(results))
    return replace(record, unchecked=unchecked, seconds=seconds), configured, CellFiles(results, predictions, timing)


RELATIVE_TOLERANCE, ABSOLUTE_TOLERANCE = 1e-9, 1e-12
"""How far a metric in ``results.json`` may lie from the same recomputed from ``predictions.json`` (a few ulps)."""


def check_predictions(results: ResultsRecord, cell: Path) -> tuple[str, Optional[Predictions]]:
    """``""`` when metrics recomputed from ``predictions.json`` agree, else why none were, with the predictions read
    (None: none); or :class:`CellProblem`."""
    try:
        scored = read_predictions(cell)
    except DataError as error:
        raise CellProblem(f"{PREDICTIONS} is damaged ({str(error).removeprefix(f'{cell / PREDICTIONS}: ')}): its "
                          f"{RESULTS} cannot be checked; left out") from None
    if scored is None:
        return f"no {PREDICTIONS}", None
    if scored.task not in task_metrics.TASK_SCORERS:
        return f"no metrics of task {scored.task!r} in istar_plugin.metrics to recompute", scored
    if problem := predictions_problem(results, scored):
        raise CellProblem(f"{PREDICTIONS} {problem}; left out")
    return "", scored


def recomputed_lines(records: Sequence[Record]) -> list[str]:
    """What ``istar-report`` prints of how many records' metrics were recomputed, and why each other one was not."""
    unchecked = [record for record in records if record.unchecked]
    return [f"metrics recomputed from {PREDICTIONS}, agreeing with {RESULTS}: {len(records) - len(unchecked)} of "
            f"{len(records)} finished cells", *(f"  {record.path}: not recomputed ({record.unchecked})"
                                                for record in unchecked)]


def wall_time_lines(records: Sequence[Record], files: dict[str, CellFiles]) -> list[str]:
    """What ``istar-report`` prints of each finished cell whose wall time is not its ``attempts.jsonl``'s: why."""
    noted = [f"  {record.path}: {files[record.path].wall_time}" for record in records
             if record.path in files and files[record.path].wall_time]
    return [f"wall times not from attempts.jsonl: {len(noted)}", *noted] if noted else []


def predictions_problem(results: ResultsRecord, scored: Predictions) -> str:
    """Why ``scored`` is not the predictions ``results`` were computed from (task, step, split, metric); else ``""``."""
    if scored.task != results.task:
        return f"is of task {scored.task}, its {RESULTS} of {results.task}"
    if results.step is not None and scored.step != results.step:
        return f"is of step {scored.step}, its {RESULTS} of step {results.step} (written by another attempt)"
    data = results.extra.get("data")
    evaluation = data.get("eval") if isinstance(data, dict) else None
    examples = evaluation.get("examples") if isinstance(evaluation, dict) else None
    if isinstance(examples, int) and len(scored.references) != examples:
        return f"holds {len(scored.references)} examples, its {RESULTS}'s evaluation split {examples}"
    if scored.task not in task_metrics.TASK_SCORERS:
        return ""
    try:
        recomputed = task_metrics.compute(scored.task, scored.predictions, scored.references)
    except (TypeError, ValueError) as error:
        return f"cannot be scored ({error})"
    for name, value in recomputed.items():
        stored = results.metric(name)
        if not isinstance(stored, numbers.Real) or isinstance(stored, bool) or (math.isnan(stored) and
                                                                                math.isnan(value)):
            continue
        if not math.isclose(stored, value, rel_tol=RELATIVE_TOLERANCE, abs_tol=ABSOLUTE_TOLERANCE):
            return (f"gives {name} {value!r}, its {RESULTS} {stored!r} (one of them was edited, or written by another "
                    "attempt)")
    return ""


def cell_record(results: ResultsRecord, cell: Path) -> Record:
    """The table row of a finished run's results; ResultsError when it lacks what the tables need."""
    criterion, task = results.criterion, results.task
    metric = reported_metrics(task, results.check("main_metric", results.main_metric, "str"))[0]
    value = results.finite_metric(metric)
    for name, number in (*results.metrics.items(), ("eval_isoscore_star", results.eval_isoscore_star)):
        as_stored = task == "squad" and name in SHOWN_AS_STORED["squad"]  # SQuAD's are percentages
        low, high = (0.0, 100.0) if as_stored else METRIC_RANGES.get(name, (-math.inf, math.inf))
        if finite_number(number) and not low <= number <= high:
            raise results.error(f"metric {name!r} is {number}, outside [{low:g}, {high:g}]: no {task} run scores that")
    layers = results.check("criterion.layers", criterion.get("layers"), "list", optional=True)
    if layers is not None and not all(isinstance(v, int) and not isinstance(v, bool) for v in layers):
        raise results.error(f"criterion.layers should be a list of integers or null, is {layers!r}")
    lam, zeta = (results.check(f"criterion.{key}", criterion.get(key), "number", optional=True)
                 for key in ("lam", "zeta"))
    best, held_out = ((results.validation or {}).get(key) for key in ("best", "metric"))
    validation = as_percent(task, held_out, float(best)) if isinstance(held_out, str) and finite_number(best) else None
    return Record(
        task, results.model, results.check("criterion.name", criterion.get("name"), "str"),
        None if lam is None else float(lam), None if zeta is None else float(zeta), results.seed, metric, value,
        as_percent(task, metric, value), results.finite_metric("eval_isoscore_star", "eval_isoscore_star"), str(cell),
        collapsed=results.collapsed is True, layers=None if layers is None else tuple(layers),
        others=tuple(sorted((name, as_percent(task, name, float(number))) for name, number in results.metrics.items()
                            if name != metric and name not in FROM_FINAL_EVALUATION and not name.startswith("eval_")
                            and finite_number(number))),
        validation=validation)
