"""A grid's runs as Ding et al.'s calibration comparison sees them (:mod:`..outputs.calibration_tables`): the
method under the paper's name, and the score in the paper's metric for the task (:mod:`..paper.ding`).

>>> import json, tempfile
>>> cell = Path(tempfile.mkdtemp())
>>> _ = (cell / "results.json").write_text(json.dumps({"task": "mrpc", "model": "bert", "seed": 1,
...     "criterion": {"name": "spectrum", "decay": "polynomial"}, "metrics": {"f1": 0.8122}, "collapsed": True}))
>>> (run,) = read_runs([cell])
>>> run.method, round(run.score, 2), run.collapsed
('Spec-Pol', 81.22, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from ...storage.results import RESULTS, read_results
from ..paper.ding import PAPER_METRIC

__all__ = ["Run", "calibration_method", "read_runs"]


@dataclass(frozen=True)
class Run:
    """One finished run as this comparison sees it: its paper metric as a percentage (None if absent)."""

    model: str
    task: str
    method: str
    seed: int
    score: Optional[float]
    collapsed: bool
    embedding_i1: Optional[float]
    embedding_i2: Optional[float]
    isoscore_star: Optional[float]


def calibration_method(criterion: dict[str, Any]) -> str:
    """The paper's name for a criterion configuration.

    >>> calibration_method({"name": "spectrum", "decay": "exponential"}), calibration_method({"name": "cosreg"})
    ('Spec-Exp', 'CosReg (hidden)')
    """
    name = criterion.get("name")
    if name == "cosreg":
        return "CosReg" if criterion.get("target") == "embeddings" else "CosReg (hidden)"
    if name == "spectrum":
        return "Spec-Pol" if criterion.get("decay", "polynomial") == "polynomial" else "Spec-Exp"
    return {"cross_entropy": "Base", "flow": "Flow", "istar": "I-STAR"}.get(name, str(name))


def read_runs(cells: Iterable[Path]) -> list[Run]:
    """The runs of the given finished cell directories (each with a ``results.json``) on a GLUE task; a cell whose
    results cannot be read raises :class:`~istar_plugin.storage.results.ResultsError` (one line)."""
    runs = []
    for cell in cells:
        results = read_results(Path(cell) / RESULTS, require_finished=True)
        task = results.task
        if task not in PAPER_METRIC:
            continue
        value = results.metric(PAPER_METRIC[task])
        score = 100.0 * value if isinstance(value, (int, float)) and math.isfinite(value) else None
        runs.append(Run(results.model, task, calibration_method(results.criterion), results.seed, score,
                        results.collapsed is True, results.embedding_i1, results.embedding_i2,
                        results.eval_isoscore_star))
    return runs
