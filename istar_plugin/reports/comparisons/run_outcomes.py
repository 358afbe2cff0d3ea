"""The per-example outcomes a paired comparison resamples, read from each run's ``predictions.json``, and why a run's
cannot be paired: damaged, of another task or step than its ``results.json``, of another length than the split the run
recorded, references unlike those of the run it is paired with, or missing beside runs that have one. A comparison
with such a run resamples its seeds alone and says why (:func:`pair_outcomes`); a grid whose runs all predate
``predictions.json`` resamples its seeds as it always did, with nothing to say.

>>> import json, tempfile
>>> from istar_plugin.reports.records.cells import Record
>>> from istar_plugin.storage.predictions import write_predictions
>>> def run(name, references):
...     cell = Path(tempfile.mkdtemp()) / name; cell.mkdir()
...     _ = write_predictions(cell, "rte", 10, references, references)
...     _ = (cell / "results.json").write_text(json.dumps({"task": "rte", "model": "m", "criterion": {}, "seed": 1,
...         "step": 10, "data": {"eval": {"examples": 4}}}))
...     return Record("rte", "m", name, None, None, 1, "accuracy", 0.5, 50.0, 0.1, str(cell))
>>> pairing = pair_outcomes("rte", "accuracy", [run("istar", [0, 1, 0, 1])], [run("base", [1, 1, 0, 0])])
>>> pairing.reasons(), pairing.method
(['predictions.json of istar does not match the references of base'], {1: None})
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ...errors import DataError
from ...storage.predictions import PREDICTIONS, read_predictions
from ...storage.results import ResultsError, read_results
from ..records.cells import Record
from .paired import Outcome, resamples_examples

__all__ = ["Pairing", "pair_outcomes", "read_outcome", "MISSING"]

MISSING = "is missing"
"""The problem of a run without ``predictions.json``: one only beside runs that have one (else an older grid)."""


@dataclass(frozen=True)
class Pairing:
    """Each side's outcome per seed (None: not resampled), and ``(cell path, problem)`` for every run whose
    ``predictions.json`` could have been resampled but cannot be paired (``is damaged (...)``)."""

    method: dict[int, Optional[Outcome]]
    base: dict[int, Optional[Outcome]]
    problems: tuple[tuple[str, str], ...]

    def reasons(self) -> list[str]:
        """Each problem naming its run by its folder's name: ``predictions.json of NAME PROBLEM``."""
        return [f"{PREDICTIONS} of {Path(path).name} {problem}" for path, problem in self.problems]


def pair_outcomes(task: str, metric: str, method_runs: Sequence[Record], base_runs: Sequence[Record]) -> Pairing:
    """The outcomes of two settings' runs, paired by seed, with the problems of the runs on their common seeds."""
    method, base = {r.seed: r for r in method_runs}, {r.seed: r for r in base_runs}
    read = {r.path: read_outcome(r) for r in (*method.values(), *base.values())}
    if not resamples_examples(task, metric):
        return Pairing({s: read[r.path][0] for s, r in method.items()}, {s: read[r.path][0] for s, r in base.items()},
                       ())
    common = sorted(set(method) & set(base))
    paired = [run for seed in common for run in (method[seed], base[seed])]
    anyone_predicted = any(read[run.path][1] != MISSING for run in paired)
    problems: dict[str, str] = {run.path: read[run.path][1] for run in paired
                                if read[run.path][1] and (anyone_predicted or read[run.path][1] != MISSING)}
    for seed in common:
        ours, theirs = read[method[seed].path][0], read[base[seed].path][0]
        if ours is not None and theirs is not None and list(ours[1]) != list(theirs[1]):
            problems[method[seed].path] = f"does not match the references of {_name(base[seed])}"
    outcome = lambda run: None if run.path in problems else read[run.path][0]  # noqa: E731
    return Pairing({s: outcome(r) for s, r in method.items()}, {s: outcome(r) for s, r in base.items()},
                   tuple(problems.items()))


def read_outcome(record: Record) -> tuple[Optional[Outcome], str]:
    """The run's (predictions, references) and ``""``, or None and what is wrong with its ``predictions.json``
    (:data:`MISSING` when it has none)."""
    cell = Path(record.path)
    try:
        scored = read_predictions(cell)
    except DataError as error:
        return None, f"is damaged ({str(error).removeprefix(f'{cell / PREDICTIONS}: ')})"
    if scored is None:
        return None, MISSING
    recorded = _recorded(cell)
    if scored.task != record.task:
        return None, f"is of task {scored.task}, its results.json of {record.task}"
    if isinstance(recorded.get("step"), int) and scored.step != recorded["step"]:
        return None, f"is of step {scored.step}, its results.json of step {recorded['step']}"
    examples = recorded.get("examples")
    if isinstance(examples, int) and len(scored.references) != examples:
        return None, f"holds {len(scored.references)} examples, its results.json's evaluation split {examples}"
    return (scored.predictions, scored.references), ""


def _recorded(cell: Path) -> dict[str, Any]:
    """The run's final step and its evaluation split's example count, as its ``results.json`` records them."""
    try:
        results = read_results(cell)
    except ResultsError:
        return {}
    data = results.extra.get("data")
    evaluation = data.get("eval") if isinstance(data, dict) else None
    return {"step": results.step, "examples": evaluation.get("examples") if isinstance(evaluation, dict) else None}


def _name(record: Record) -> str:
    return Path(record.path).name
