"""What a cell's run directory says beyond its ``results.json``: how long the run took (``attempts.jsonl``, else the
metrics log), which host ran its last attempt, its evaluations over the steps (the metrics log's ``eval/`` records)
and, for a cell without results, where to look next (the newest checkpoint and stderr line).

>>> import json, tempfile
>>> cell = Path(tempfile.mkdtemp())
>>> _ = (cell / "attempts.jsonl").write_text(json.dumps({"event": "start", "time": 100.0, "host": "n1"}) + "\\n"
...                                          + json.dumps({"event": "finished", "time": 160.5}) + "\\n")
>>> _ = (cell / "job.err").write_text("loading\\rstep 10/20\\n\\n")
>>> wall_seconds(cell), attempt_host(cell), failure_hints(cell).endswith("job.err: step 10/20")
(60.5, 'n1', True)
>>> _ = (cell / "metrics.jsonl").write_text("".join(json.dumps(record) + "\\n" for record in (
...     {"step": 0, "eval/accuracy": 0.5}, {"step": 10, "train/loss": 0.7}, {"step": 20, "eval/accuracy": 0.8})))
>>> evaluations(cell)
{0: {'eval/accuracy': 0.5}, 20: {'eval/accuracy': 0.8}}
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

__all__ = ["wall_seconds", "attempt_host", "evaluations", "failure_hints"]


def wall_seconds(cell: Path) -> Optional[float]:
    """Start to finish of the cell's last attempt (``attempts.jsonl``), else first to last metrics record."""
    for name, first_event in (("attempts.jsonl", "start"), ("metrics.jsonl", None)):
        records = _records(Path(cell) / name)
        if records is None:
            continue
        if first_event:
            starts = [r["time"] for r in records if r.get("event") == first_event]
            ends = [r["time"] for r in records if r.get("event") == "finished"]
            if starts and ends and ends[-1] >= starts[-1]:
                return ends[-1] - starts[-1]
        elif len(records) > 1:
            return records[-1]["time"] - records[0]["time"]
    return None


def attempt_host(cell: Path) -> Optional[str]:
    """The host of the cell's last recorded attempt (a grid cell's ``attempts.jsonl``), None without one."""
    hosts = [record["host"] for record in _records(Path(cell) / "attempts.jsonl") or () if record.get("host")]
    return hosts[-1] if hosts else None


def evaluations(cell: Path) -> dict[int, dict[str, Any]]:
    """Step -> the ``eval/`` values the cell's metrics log recorded at that step (a step evaluated twice: the later
    record), in step order; {} without a readable log."""
    evaluated: dict[int, dict[str, Any]] = {}
    for record in _records(Path(cell) / "metrics.jsonl") or ():
        values = {key: value for key, value in record.items() if key.startswith("eval/")}
        if values and isinstance(record.get("step"), int):
            evaluated[record["step"]] = values
    return dict(sorted(evaluated.items()))


def _records(path: Path) -> Optional[list[dict]]:
    """The JSON records of a JSON-lines file; None when it cannot be read."""
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None


def failure_hints(cell: Path) -> str:
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
