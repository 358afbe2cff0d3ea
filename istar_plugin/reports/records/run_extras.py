"""What a cell's run directory says beyond its :class:`~.cells.Record` (None or empty where it recorded nothing)."""
from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ...storage.logs import last_line, read_records
from ...storage.provenance import PROVENANCE
from ...storage.reading import cannot_read
from ...storage.results import ResultsRecord, read_results

ATTEMPTS = "attempts.jsonl"

ResultsReader = Callable[[Path], Optional[ResultsRecord]]  # a cell's results.json, None where none is readable


def recorded_results(cell: Path) -> Optional[ResultsRecord]:
    """The cell's ``results.json`` (finished or failed), None where it has none readable."""
    return read_results(Path(cell), strict=False)


def finite_number(value: Any) -> bool:
    """Whether ``value`` is a real number (not a bool), neither infinite nor NaN."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def wall_seconds(cell: Path) -> Optional[float]:
    """Start to finish of the cell's last attempt (``attempts.jsonl``), else first to last metrics record."""
    return wall_time(cell)[0]


def wall_time(cell: Path) -> tuple[Optional[float], str]:
    """:func:`wall_seconds` of ``cell``, and ``""`` or, where its ``attempts.jsonl`` is damaged (a line not a JSON
    object, not UTF-8, a folder, a start or finish whose time is no number) and so not used, where its wall time came
    from and why. A metrics record whose time is no number leaves the cell's wall time not recorded."""
    path = Path(cell) / ATTEMPTS
    try:
        attempts, damage = read_records(path), ""
        if not all(isinstance(record, dict) for record in attempts):
            attempts, damage = [], f"{path}: a line is not a JSON object"
    except UnicodeDecodeError as error:
        attempts, damage = [], cannot_read(path, "attempts log", error)
    except ValueError as error:
        attempts, damage = [], str(error)
    except OSError as error:
        attempts, damage = [], cannot_read(path, "attempts log", error)
    events = [record for record in attempts if record.get("event") in ("start", "finished")]
    if untimed := next((record for record in events if not finite_number(record.get("time"))), None):
        events = []
        damage = (f"{path}: a {untimed['event']} record's \"time\" is "
                  f"{json.dumps(untimed['time']) if 'time' in untimed else 'missing'}, not a number of seconds")
    starts = [record["time"] for record in events if record["event"] == "start"]
    ends = [record["time"] for record in events if record["event"] == "finished"]
    if starts and ends and ends[-1] >= starts[-1]:
        return ends[-1] - starts[-1], ""
    times = [record.get("time") for record in read_records(Path(cell) / "metrics.jsonl", strict=False)]
    seconds = times[-1] - times[0] if len(times) > 1 and all(map(finite_number, times)) else None
    source = "not recorded" if seconds is None else "from metrics.jsonl (first to last record)"
    return seconds, damage and f"wall time {source}, its {ATTEMPTS} being damaged: {damage}"


def attempt_host(cell: Path) -> Optional[str]:
    """The host of the cell's last recorded attempt (a grid cell's ``attempts.jsonl``), None without one."""
    hosts = [record["host"] for record in read_records(Path(cell) / "attempts.jsonl", strict=False)
             if record.get("host")]
    return hosts[-1] if hosts else None


def evaluations(cell: Path) -> dict[int, dict[str, Any]]:
    """Step -> the ``eval/`` values the cell's metrics log recorded at that step (the later of two), in step order."""
    evaluated: dict[int, dict[str, Any]] = {}
    for record in read_records(Path(cell) / "metrics.jsonl", strict=False):
        values = {key: value for key, value in record.items() if key.startswith("eval/")}
        if values and isinstance(record.get("step"), int):
            evaluated[record["step"]] = values
    return dict(sorted(evaluated.items()))


def failure_hints(cell: Path) -> str:
    """Where to look next: the newest checkpoint (an interrupted or running job) and the newest stderr log."""
    hints = []
    if checkpoints := sorted((cell / "checkpoints").glob("step_*.pt")):
        hints.append(f"last checkpoint {checkpoints[-1].name}")
    if logs := sorted(cell.rglob("*.err"), key=lambda log: log.stat().st_mtime):
        said = last_line(logs[-1])
        hints.append(f"log {logs[-1]}" + (f": {said}" if said else ""))
    return "".join(f"; {hint}" for hint in hints)


def layer_isoscores(cell: Path, layers: Sequence[int], read: ResultsReader = recorded_results
                    ) -> Optional[list[float]]:
    """The run's eval IsoScore* of each of ``layers`` (hidden-state indices; 0, the embeddings, has none)."""
    results = read(Path(cell))
    per_layer = None if results is None else results.eval_isoscore_star_per_layer
    if not per_layer:
        return None
    return [float(per_layer[index - 1 if index > 0 else index]) for index in layers if index != 0]


def sentence_embeddings(cell: Path, read: ResultsReader = recorded_results) -> Optional[dict[str, dict[str, Any]]]:
    """Transform -> the evaluation split's sentence-embedding measures, as the run recorded them."""
    results = read(Path(cell))
    return None if results is None else results.extra.get("sentence_embeddings")


@dataclass(frozen=True)
class Provenance:
    """What a cell recorded of where it ran; None: not recorded."""

    host: Optional[str] = None
    cpu: Optional[str] = None
    cpu_flags: Optional[tuple[str, ...]] = None  # which of storage.provenance.CPU_FLAGS the CPU has
    torch: Optional[str] = None
    precision: Optional[str] = None
    commit: Optional[str] = None


def cell_provenance(cell: Path, read: ResultsReader = recorded_results) -> Provenance:
    """The provenance ``cell``'s ``results.json`` records (empty when it has none readable)."""
    results = read(Path(cell))
    if results is None:
        return Provenance()
    recorded = results.extra.get(PROVENANCE)
    recorded = recorded if isinstance(recorded, dict) else {}
    flags = recorded.get("cpu_flags")
    return Provenance(host=recorded.get("host") or attempt_host(Path(cell)), cpu=recorded.get("cpu"),
                      cpu_flags=None if flags is None else tuple(flags), torch=recorded.get("torch"),
                      precision=results.extra.get("precision"), commit=recorded.get("commit"))
