"""Table 3 of the Isotropy Layer paper from a grid: stage 1 beside stage 2, our numbers beside the paper's.
A stage-2 cell is a finished ``isolayer`` cell; its stage 1 is the run its ``init_from`` names."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ...storage.seeds import std_over_seeds, std_text
from ..paper import paper_rows
from ..records.cells import as_percent
from ..records.run_extras import ResultsReader, recorded_results, wall_seconds
from ..tables import markdown_table

STAGE_TWO = "isolayer"
COLUMNS = ("model", "task", "metric", "variant", "seeds", "stage 1", "EV 1", "IsoScore 1", "stage 2", "EV 2",
           "IsoScore 2", "improved", "trainable 1", "trainable 2", "seconds 1", "seconds 2", "paper stage 1",
           "paper stage 2", "paper source")


@dataclass(frozen=True)
class Run:
    """What Table 3 needs of one finished cell."""

    path: Path
    model: str
    task: str
    metric: str
    score: float
    ev: Optional[tuple[float, ...]]
    isoscore: Optional[float]
    trainable: Optional[int]
    seconds: Optional[float]
    init_from: Optional[Path]
    criterion: dict
    one_class: Optional[bool] = None  # predicted a single class on the evaluation split (None: not recorded)


Seconds = Callable[[Path], Optional[float]]  # a cell's wall time, as run_extras.wall_seconds reads it


def read_run(cell: Path, metrics: Optional[dict[str, str]] = None, read: ResultsReader = recorded_results,
             seconds: Seconds = wall_seconds) -> Optional[Run]:
    """The cell's Table 3 record (``metrics``: task -> the metric reported, else the main one); None if unfinished.
    ``read``: a cell's ``results.json``; ``seconds``: its wall time."""
    results = read(Path(cell))
    if results is None or not results.finished:
        return None
    metric = (metrics or {}).get(results.task) or results.main_metric
    value = results.metrics.get(metric)
    if not isinstance(metric, str) or not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return Run(Path(cell).resolve(), results.model, results.task, metric, as_percent(results.task, metric, value),
               tuple(results.cls_explained_variance or ()) or None, results.cls_isoscore, results.trainable_parameters,
               seconds(Path(cell)), Path(results.init_from).resolve() if results.init_from else None, results.criterion,
               results.collapsed)


def rows(cells: Sequence[Path], read: ResultsReader = recorded_results, seconds: Seconds = wall_seconds
         ) -> list[dict[str, Any]]:
    """One row per model, task and stage-2 variant that has at least one finished stage-2 cell (``read``: a cell's
    ``results.json``; ``seconds``: its wall time)."""
    paper = {(row["model"], row["task"], row["stage"]): row for row in paper_rows("isolayer_table3.csv")}
    paper_metric = {task: row["metric"] for (_, task, _), row in paper.items()}
    runs = {run.path: run for run in (read_run(cell, paper_metric, read, seconds) for cell in cells)
            if run is not None}
    groups: dict[tuple, list[tuple[Optional[Run], Run]]] = {}
    for run in runs.values():
        if run.criterion.get("name") != STAGE_TWO:
            continue
        first = None if run.init_from is None else (runs.get(run.init_from) or runs.get(
            run.path.parent / run.init_from.name) or read_run(run.init_from, paper_metric, read, seconds))
        variant = " ".join(f"{k}={v}" for k, v in sorted(run.criterion.items()) if k != "name")
        groups.setdefault((run.model, run.task, run.metric, variant), []).append((first, run))
    table = []
    for (model, task, metric, variant), pairs in sorted(groups.items()):
        firsts = [first for first, _ in pairs if first is not None]
        improved = sum(1 for first, second in pairs if first is not None and second.score > first.score)
        row = {"model": model, "task": task, "metric": metric, "seeds": len(pairs), "paper source": "",
               "variant": variant if len({key[3] for key in groups if key[:2] == (model, task)}) > 1 else "",
               "improved": f"{improved}/{len(firsts)}"}
        for stage, stage_runs in (("1", firsts), ("2", [second for _, second in pairs])):
            collapsed = sum(1 for r in stage_runs if r.one_class)
            row[f"stage {stage}"] = _median_std([r.score for r in stage_runs]) + (
                f", {collapsed}/{len(stage_runs)} one class" if collapsed else "")
            row[f"EV {stage}"] = _ev([r.ev for r in stage_runs])
            row[f"IsoScore {stage}"] = _median_text([r.isoscore for r in stage_runs], "{:.4f}")
            row[f"trainable {stage}"] = _median_text([r.trainable for r in stage_runs], "{:.0f}", "unknown")
            row[f"seconds {stage}"] = _median_text([r.seconds for r in stage_runs], "{:.0f}", "unknown")
            reference = paper.get((model, task, stage))
            row[f"paper stage {stage}"] = _paper_text(reference)
            if reference:
                row["paper source"] = reference["source"]
        table.append(row)
    return table


def _median_std(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.1f} ({std_text(std_over_seeds(values), '.2f')})" if values else "–"


def _median_text(values: Sequence[Optional[float]], pattern: str, missing: str = "collapsed") -> str:
    """Median of the known values; ``missing`` names what a None means (a collapsed representation, or unknown)."""
    known = [v for v in values if v is not None]
    if not values:
        return "–"
    if not known:
        return missing
    text = pattern.format(statistics.median(known))
    return text if len(known) == len(values) else f"{text} ({len(values) - len(known)} {missing})"


def _ev(values: Sequence[Optional[tuple[float, ...]]]) -> str:
    known = [v for v in values if v]
    if not known:
        return "collapsed" if values else "–"
    return "/".join(f"{statistics.median(v[k] for v in known):.2f}".lstrip("0") for k in range(len(known[0])))


def _paper_text(reference: Optional[dict[str, str]]) -> str:
    if not reference:
        return "–"
    text = f"{reference['median']} ({reference['std']})"
    if reference["ev1"]:
        text += " " + "/".join(reference[f"ev{k}"].lstrip("0") for k in (1, 2, 3))
    return text


def markdown(table: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table, the paper's source named below it."""
    columns = [c for c in COLUMNS if c != "paper source" and (c != "variant" or any(row["variant"] for row in table))]
    lines = [markdown_table(columns, ([row[c] for c in columns] for row in table)).rstrip("\n")]
    sources = sorted({row["paper source"] for row in table if row["paper source"]})
    notes = ["", "Scores: median (sample std) over seeds, percent; EV_1/EV_2/EV_3 and IsoScore of the head inputs on "
             "the evaluation split (medians); improved: seeds whose stage 2 beats its own stage 1; \"k/n one class\": "
             "k runs predicted a single class (collapsed classifiers)."]
    notes += [f"Paper: {source}." for source in sources] or ["Paper: no numbers for these models."]
    return "\n".join(lines + notes) + "\n"
