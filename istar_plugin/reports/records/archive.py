"""Archives of a grid's records, small enough for git, which ``istar-report`` reads exactly as the grid itself:
each finished or failed cell's :data:`~.cells.RECORD_FILES`, its metrics log summarised, and ``archive.json``."""
from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ...errors import ConfigError, RunDirError
from ...storage.atomic import atomic_write_bytes
from ...storage.lock import RunDirLock
from ...storage.logs import json_lines
from ...storage.ownership import ARCHIVE_MARKER, check_writable, mark
from ...storage.results import RESULTS, ResultsError, read_results
from .cells import RECORD_FILES, find_cells

ORIGIN = "archive.json"
METRICS = "metrics.jsonl"
TRAINING_RECORDS_KEPT = 100
WRITE_ORDER = sorted(RECORD_FILES, key=lambda name: name == "config.yaml")  # config.yaml last: then it is a cell


@dataclass(frozen=True)
class Outcome:
    """What became of one cell: ``state`` archived, unchanged (archived before, the same record) or skipped."""

    name: str
    state: str
    detail: str


@dataclass(frozen=True)
class _Snapshot:
    name: str
    files: dict[str, bytes]
    origin: bytes
    status: str


@dataclass(frozen=True)
class Plan:
    """What archiving a grid will do, checked before anything is written: :meth:`write` does it."""

    directory: Path
    new: tuple[_Snapshot, ...]
    outcomes: tuple[Outcome, ...]

    def write(self) -> list[Outcome]:
        """Write the new cells (and the archive's marker); every cell's outcome, in the order of their names."""
        if not (self.directory / ARCHIVE_MARKER).is_file():
            mark(self.directory, ARCHIVE_MARKER)
        outcomes = list(self.outcomes)
        for snapshot in self.new:
            _write(self.directory / snapshot.name, snapshot)
            size = sum(map(len, snapshot.files.values())) + len(snapshot.origin)
            outcomes.append(Outcome(snapshot.name, "archived", f"{snapshot.status}, {size / 1000:.1f} kB"))
        return sorted(outcomes, key=lambda outcome: outcome.name)


def archive(grid: str | os.PathLike, directory: str | os.PathLike) -> list[Outcome]:
    """Copy the records of ``grid``'s cells into ``directory``; one outcome per cell. Raises as :func:`plan` does."""
    return plan(grid, directory).write()


def plan(grid: str | os.PathLike, directory: str | os.PathLike,
         cells: Optional[Callable[[Path], bool]] = None) -> Plan:
    """What archiving ``grid``'s cells (those ``cells`` accepts) into ``directory`` will do, writing nothing.

    RunDirError for foreign files or a different record in ``directory``, ConfigError when it lies inside ``grid``."""
    grid, directory = Path(grid), Path(directory)
    if not grid.is_dir():
        raise NotADirectoryError(f"grid directory {str(grid)!r} does not exist or is not a directory")
    if grid.resolve() in (directory.resolve(), *directory.resolve().parents):
        raise ConfigError(f"--archive {directory} is inside the grid {grid}: choose a folder outside it (a report on "
                          "the grid would read every cell twice)")
    check_writable(directory, ARCHIVE_MARKER, "--archive")
    outcomes: dict[str, Outcome] = {}
    snapshots = []
    for cell in find_cells(grid):
        if cells is not None and not cells(cell):
            continue
        name = cell.relative_to(grid).as_posix() if cell != grid else grid.resolve().name
        try:
            snapshots.append(_snapshot(cell, name))
        except (ResultsError, RunDirError) as error:
            outcomes[name] = Outcome(name, "skipped", error.problem if isinstance(error, ResultsError) else str(error))
    new = []
    conflicts = []
    for snapshot in snapshots:
        archived = _archived_files(directory / snapshot.name)
        if archived is None:
            new.append(snapshot)
        elif archived == snapshot.files:
            outcomes[snapshot.name] = Outcome(snapshot.name, "unchanged", snapshot.status)
        else:
            conflicts.append((snapshot.name, next(file for file in RECORD_FILES
                                                  if archived.get(file) != snapshot.files.get(file))))
    if conflicts:
        (name, file), others = conflicts[0], f" (and {len(conflicts) - 1} other cells)" if len(conflicts) > 1 else ""
        raise RunDirError(f"--archive {directory}: {name}/{file} differs from the record archived there{others}; "
                          f"nothing was archived (an archived record is never replaced: remove {directory / name} to "
                          "archive this one)")
    return Plan(directory, tuple(new), tuple(outcomes.values()))


def _snapshot(cell: Path, name: str) -> _Snapshot:
    """The cell's record as bytes, read under its run lock; raises ResultsError or RunDirError saying why not."""
    read_results(cell / RESULTS)  # before the lock: a missing or malformed record's line, as every command gives it
    with RunDirLock(cell, role="cell", advice="archive it once its run ends"):
        results = read_results(cell / RESULTS)
        files = {file: (cell / file).read_bytes() for file in RECORD_FILES if (cell / file).is_file()}
        origin = (cell / ORIGIN).read_bytes() if (cell / ORIGIN).is_file() else None
    if "config.yaml" not in files:
        raise RunDirError("no config.yaml beside results.json")
    status = "finished" if results.finished else f"failed: {' '.join(str(results.reason).split())}"
    if origin is None:  # a grid's cell, not an archive's: its metrics log summarised, where it came from noted
        kept, total = 0, 0
        if METRICS in files:
            text, kept, total = summarised_log(files[METRICS].decode("utf-8", errors="replace"))
            files[METRICS] = text.encode("utf-8")
        origin = (json.dumps({"source": f"{socket.gethostname()}:{cell.resolve()}",
                              "archived": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              METRICS: {"records": total, "kept": kept}}, indent=2, sort_keys=True) + "\n").encode()
    return _Snapshot(name, files, origin, status)


def _archived_files(cell: Path) -> dict[str, bytes] | None:
    """The record archived in ``cell``; None when there is none yet (or only the part an interrupted archive wrote)."""
    if not (cell / "config.yaml").is_file():
        return None
    return {file: (cell / file).read_bytes() for file in RECORD_FILES if (cell / file).is_file()}


def _write(cell: Path, snapshot: _Snapshot) -> None:
    cell.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(cell / ORIGIN, snapshot.origin)
    for file in WRITE_ORDER:
        if file in snapshot.files:
            atomic_write_bytes(cell / file, snapshot.files[file])


def summarised_log(text: str, training_records: int = TRAINING_RECORDS_KEPT) -> tuple[str, int, int]:
    """``metrics.jsonl`` with only ``training_records`` of its training records kept; (text, kept, there were)."""
    lines = [line + "\n" for line in text.splitlines() if line.strip()]
    records = [record or {} for record in json_lines("".join(lines), METRICS, strict=False)]  # {}: a line cut short
    training = [i for i, record in enumerate(records) if any(key.startswith("train/") for key in record)]
    evaluated = {record.get("step") for record in records if any(key.startswith("eval/") for key in record)}
    stride = max(1, math.ceil(len(training) / training_records))
    kept = (set(range(len(lines))) - set(training)) | set(training[::stride]) | set(training[-1:])
    kept |= {i for i in training if records[i].get("step") in evaluated}
    kept |= {0, len(lines) - 1} if lines else set()
    return "".join(lines[i] for i in sorted(kept)), len(kept), len(lines)
