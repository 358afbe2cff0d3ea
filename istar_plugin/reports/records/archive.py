"""Archives small enough for git, which ``istar-report`` reads exactly as what was archived. A grid's: each finished
or failed cell's :data:`~.cells.RECORD_FILES`, its metrics log summarised, and ``archive.json``. An ``istar-tune``
search's: ``search.yaml``, its study as ``study.json``, ``progress.log``, and the records of every ended trial's runs
and of ``final/``, each kept as a grid's cell. Archiving again adds what ended since and changes nothing archived."""
from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

from optuna.trial import TrialState

from ...config.searches import FINAL, PROGRESS, RECORD, TRIALS, SearchSpec, read_search, trial_dir
from ...errors import ConfigError, RunDirError
from ...storage.atomic import atomic_write_bytes, atomic_write_text
from ...storage.lock import RunDirLock
from ...storage.logs import json_lines
from ...storage.ownership import ARCHIVE_MARKER, GRID_MARKER, IGNORED, check_writable, mark
from ...storage.results import RESULTS, ResultsError, read_results
from .cells import RECORD_FILES, collect, find_cells, grid_directories
from .searches import (STUDY_FILE, disagreements, is_search, problem_line, read, read_record, read_study,
                       study_text)

ORIGIN = "archive.json"
METRICS = "metrics.jsonl"
TRAINING_RECORDS_KEPT = 100
ENDED = frozenset({TrialState.COMPLETE.name, TrialState.PRUNED.name, TrialState.FAIL.name})  # its record is final


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
    task: str


@dataclass(frozen=True)
class Plan:
    """What archiving a grid will do, checked before anything is written: :meth:`write` does it."""

    directory: Path
    new: tuple[_Snapshot, ...]
    outcomes: tuple[Outcome, ...]
    tasks: frozenset[str] = frozenset()

    def write(self, **details: Any) -> list[Outcome]:
        """Write the new cells (and the archive's marker, with ``details``); every cell's outcome, in name order."""
        if not (self.directory / ARCHIVE_MARKER).is_file() or (details and marked(self.directory) != details):
            mark(self.directory, ARCHIVE_MARKER, **details)
        outcomes = list(self.outcomes)
        for snapshot in self.new:
            cell = self.directory / snapshot.name
            cell.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(cell / ORIGIN, snapshot.origin)
            for file, content in sorted(snapshot.files.items(), key=lambda item: item[0] == "config.yaml"):
                atomic_write_bytes(cell / file, content)  # config.yaml last: then it is a cell
            size = sum(map(len, snapshot.files.values())) + len(snapshot.origin)
            outcomes.append(Outcome(snapshot.name, "archived", f"{snapshot.status}, {size / 1000:.1f} kB"))
        return sorted(outcomes, key=lambda outcome: outcome.name)


def archive(grid: str | os.PathLike, directory: str | os.PathLike) -> list[Outcome]:
    """Copy the records of ``grid``'s cells into ``directory``; one outcome per cell. Raises as :func:`plan` does."""
    planned = plan(grid, directory, whole_grid=True)
    details = {"grid": grid_name(Path(grid)) or marked(Path(directory)).get("grid"),
               "tasks": sorted(archived_tasks(Path(directory)) | planned.tasks)}
    return planned.write(**{key: value for key, value in details.items() if value})


def _check_belongs(grid: Path, directory: Path, tasks: frozenset[str]) -> None:
    name, held, held_tasks = grid_name(grid), marked(directory).get("grid"), archived_tasks(directory)
    listed = lambda tasks: ", ".join(sorted(tasks)) or "no task yet"  # noqa: E731
    shown = f"grid {name or grid.resolve().name} ({listed(tasks)})"
    if (directory / RECORD).is_file():
        raise RunDirError(f"--archive {directory}: is the archive of search {read_search(directory).name}, not of "
                          f"{shown}; choose a new or empty --archive folder for the grid, nothing was changed")
    if (held and name and held != name) or (tasks and held_tasks and not tasks & held_tasks):
        raise RunDirError(f"--archive {directory}: holds {f'grid {held}' if held else 'a grid'} "
                          f"({listed(held_tasks)}), not {shown}; archive each grid into its own --archive folder, "
                          "nothing was changed")


def left_out(*archives: str | os.PathLike) -> list[str]:
    """``PATH: reason`` for each record of the archives (of grids or of searches) their report leaves out, but for
    failed runs: a damaged, edited or duplicate record, or a trial's runs that disagree with its study."""
    grids = [Path(folder) for folder in archives if not is_search(folder)]
    problems, disagreeing = list(collect(*grids)[1] if grids else []), []
    for search in (read(Path(folder)) for folder in archives if is_search(folder)):
        problems += search.final_problems
        disagreeing += [f"{search.directory}: {problem_line(row)}" for row in disagreements(search)]
    return [f"{path}: {reason}" for path, reason in problems  # a failed run is no problem of the archive
            if (results := read_results(Path(path) / RESULTS, strict=False)) is None or results.finished] + disagreeing


def grid_name(grid: Path) -> Optional[str]:
    """The grid's name as an archive's marker or istar-grid records it, else its folder's (None: an unnamed archive)."""
    for marker in (ARCHIVE_MARKER, GRID_MARKER):
        if (grid / marker).is_file():
            return marked(grid, marker).get("grid") or (None if marker == ARCHIVE_MARKER else grid.resolve().name)
    return grid.resolve().name


def marked(directory: Path, marker: str = ARCHIVE_MARKER) -> dict[str, Any]:
    """The details a marker in ``directory`` records (empty without a readable one), its time left out."""
    try:
        details = json.loads((Path(directory) / marker).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {key: value for key, value in details.items() if key != "time"} if isinstance(details, dict) else {}


def archived_tasks(directory: Path) -> frozenset[str]:
    """The tasks an archive holds: as its marker records them, else those of its cells' records."""
    recorded = marked(directory).get("tasks")
    if isinstance(recorded, list):
        return frozenset(map(str, recorded))
    cells = find_cells(directory) if directory.is_dir() else []
    return frozenset(results.task for cell in cells
                     if (results := read_results(cell / RESULTS, strict=False)) is not None)


def plan(grid: str | os.PathLike, directory: str | os.PathLike, cells: Optional[Callable[[Path], bool]] = None,
         whole_grid: bool = False) -> Plan:
    """What archiving ``grid``'s cells (those ``cells`` accepts) into ``directory`` will do, writing nothing.
    RunDirError for foreign files or another record there (``whole_grid``: or grid); ConfigError for a ``grid`` that
    is not a directory or a ``directory`` inside it."""
    (grid,), directory = grid_directories(grid), Path(directory)
    if directory.resolve().is_relative_to(grid.resolve()):
        raise ConfigError(f"--archive {directory} is inside the grid {grid}: choose a folder outside it (a report on "
                          "the grid would read every cell twice)")
    check_writable(directory, ARCHIVE_MARKER, "--archive")
    outcomes: dict[str, Outcome] = {}
    snapshots = []
    for cell in filter(cells, find_cells(grid)):  # cells None: every cell
        name = cell.relative_to(grid).as_posix() if cell != grid else grid.resolve().name
        try:
            snapshots.append(_snapshot(cell, name))
        except (ResultsError, RunDirError) as error:
            outcomes[name] = Outcome(name, "skipped", error.problem if isinstance(error, ResultsError) else str(error))
    tasks = frozenset(snapshot.task for snapshot in snapshots)
    if whole_grid:
        _check_belongs(grid, directory, tasks)
    new, conflicts = [], []
    for snapshot in snapshots:
        archived = _record_files(directory / snapshot.name)
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
    return Plan(directory, tuple(new), tuple(outcomes.values()), tasks)


def _snapshot(cell: Path, name: str) -> _Snapshot:
    read_results(cell / RESULTS)  # before the lock: a missing or malformed record's line, as every command gives it
    with RunDirLock(cell, role="cell", advice="archive it once its run ends"):
        results = read_results(cell / RESULTS)
        files = _record_files(cell)
        origin = (cell / ORIGIN).read_bytes() if (cell / ORIGIN).is_file() else None
    if files is None:
        raise RunDirError("no config.yaml beside results.json")
    status = "finished" if results.finished else f"failed: {' '.join(str(results.reason).split())}"
    if origin is None:  # a grid's cell, not an archive's: its metrics log summarised, where it came from noted
        text, kept, total = summarised_log(files.get(METRICS, b"").decode("utf-8", errors="replace"))
        if METRICS in files:
            files[METRICS] = text.encode("utf-8")
        origin = (json.dumps({"source": f"{socket.gethostname()}:{cell.resolve()}",
                              "archived": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              METRICS: {"records": total, "kept": kept}}, indent=2, sort_keys=True) + "\n").encode()
    return _Snapshot(name, files, origin, status, results.task)


def _record_files(cell: Path) -> dict[str, bytes] | None:
    if not (cell / "config.yaml").is_file():
        return None
    return {file: (cell / file).read_bytes() for file in RECORD_FILES if (cell / file).is_file()}


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


def archive_search(search_dir: str | Path, directory: str | Path) -> tuple[list[Outcome], int, int]:
    """Archive the search in ``search_dir`` into ``directory``: each run's outcome (``trials/NNNN/seed=S``,
    ``final/CELL``), the trials archived and how many had not ended; RunDirError or ConfigError, archiving nothing."""
    search_dir, directory = Path(search_dir), Path(directory)
    if directory.resolve().is_relative_to(search_dir.resolve()):
        raise ConfigError(f"--archive {directory} is inside the search {search_dir}: choose a folder outside it")
    spec = read_search(search_dir)
    spec_bytes = (search_dir / RECORD).read_bytes()
    text = study_text(read_study(spec, search_dir, "nothing archived"))
    record = json.loads(text)
    progress = (search_dir / PROGRESS).read_bytes() if (search_dir / PROGRESS).is_file() else None
    check_writable(directory, ARCHIVE_MARKER, "--archive")
    if (differs := _difference(directory, spec, record, progress)) is not None:
        raise RunDirError(f"--archive {directory}: {differs} differs from the record archived there; nothing was "
                          "archived (an archived record is never replaced: choose a new --archive folder for this one)")
    ended = {trial_dir(search_dir, trial["number"]) for trial in record["trials"] if trial["state"] in ENDED}
    plans = [(folder, plan(search_dir / folder, directory / folder, cells))
             for folder, cells in ((TRIALS, lambda cell: cell.parent in ended), (FINAL, None))
             if (search_dir / folder).is_dir()]
    if not (directory / ARCHIVE_MARKER).is_file():
        mark(directory, ARCHIVE_MARKER, search=f"{socket.gethostname()}:{search_dir.resolve()}")
    if not (directory / RECORD).is_file() or (directory / RECORD).read_bytes() != spec_bytes:  # a new budget
        atomic_write_bytes(directory / RECORD, spec_bytes)
    outcomes = [replace(outcome, name=f"{folder}/{outcome.name}") for folder, cells in plans
                for outcome in cells.write()]
    if progress is not None:
        atomic_write_bytes(directory / PROGRESS, progress)
    atomic_write_text(directory / STUDY_FILE, text)
    return outcomes, len(record["trials"]), sum(trial["state"] not in ENDED for trial in record["trials"])


def _difference(directory: Path, spec: SearchSpec, record: dict[str, Any], progress: Optional[bytes]) -> Optional[str]:
    if not (directory / RECORD).is_file():
        if directory.is_dir() and any(entry.name not in {*IGNORED, ARCHIVE_MARKER} for entry in directory.iterdir()):
            raise RunDirError(f"--archive {directory}: is an archive of a grid's records, not of a search; choose a "
                              "new or empty --archive folder, nothing was changed")
        return None
    if changed := spec.differences(read_search(directory)):
        return f"{RECORD} ({', '.join(changed)})"
    if (directory / PROGRESS).is_file() and not (progress or b"").startswith((directory / PROGRESS).read_bytes()):
        return PROGRESS
    if not (directory / STUDY_FILE).is_file():
        return None
    archived = read_record(directory / STUDY_FILE, f"--archive {directory}")
    if any(archived.get(key) != record[key] for key in ("study", "directions", "user_attrs")):
        return f"{STUDY_FILE} (the study's name, direction or attributes)"
    live = {trial["number"]: json.dumps(trial, sort_keys=True) for trial in record["trials"]}  # text: NaN == NaN
    for trial in archived["trials"]:
        number = trial.get("number")
        if number not in live or (trial.get("state") in ENDED and json.dumps(trial, sort_keys=True) != live[number]):
            return f"{STUDY_FILE} (trial {number})"
    return None
