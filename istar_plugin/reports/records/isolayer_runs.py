"""A grid's runs as the Isotropy Layer paper's Table 3 sees them (:mod:`..outputs.isolayer_table3`): score, head
inputs' explained variance and IsoScore, trainable parameters, wall time and the stage-1 run a stage 2 started from.

>>> import json, tempfile
>>> cell = Path(tempfile.mkdtemp())
>>> _ = (cell / "results.json").write_text(json.dumps({"task": "rte", "model": "bert", "seed": 1,
...     "criterion": {"name": "isolayer"}, "main_metric": "accuracy", "metrics": {"accuracy": 0.63},
...     "cls_explained_variance": [0.3, 0.35, 0.38], "trainable_parameters": 10}))
>>> run = read_run(cell)
>>> run.metric, round(run.score, 2), run.ev, run.trainable, run.init_from
('accuracy', 63.0, (0.3, 0.35, 0.38), 10, None)
>>> read_run(cell.parent / "no such cell") is None
True
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...storage.results import RESULTS, ResultsError, read_results
from .cells import as_percent
from .run_logs import wall_seconds

__all__ = ["Run", "read_run"]


@dataclass(frozen=True)
class Run:
    """What Table 3 needs of one finished cell."""

    path: Path
    model: str
    task: str
    metric: str
    seed: int
    score: float
    ev: Optional[tuple[float, ...]]
    isoscore: Optional[float]
    trainable: Optional[int]
    seconds: Optional[float]
    init_from: Optional[Path]
    criterion: dict
    one_class: Optional[bool] = None  # predicted a single class on the evaluation split (None: not recorded)


def read_run(cell: Path, metrics: Optional[dict[str, str]] = None) -> Optional[Run]:
    """The cell's Table 3 record, or None when it has no readable ``results.json`` of a finished run (the grid
    report lists such cells among its missing or failed ones, with :func:`~istar_plugin.storage.results.read_results`'
    line).

    ``metrics``: task -> the metric to report (the paper's: MRPC accuracy, not our combined score); default
    the run's main metric."""
    try:
        results = read_results(Path(cell) / RESULTS, require_finished=True)
        metric = (metrics or {}).get(results.task) or results.check("main_metric", results.main_metric, "str")
        value = results.check(f"metric {metric!r}", results.metrics.get(metric), "number")
    except ResultsError:
        return None
    ev = results.cls_explained_variance
    init = results.init_from
    return Run(Path(cell).resolve(), results.model, results.task, metric, results.seed,
               as_percent(results.task, metric, value), tuple(ev) if ev else None, results.cls_isoscore,
               results.trainable_parameters, wall_seconds(cell), Path(init).resolve() if init else None,
               results.criterion, results.collapsed)
