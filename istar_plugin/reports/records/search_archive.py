"""Archives of an ``istar-tune`` search, small enough for git: ``search.yaml``, the study as ``study.json``,
``progress.log``, and the records of every ended trial's runs and of ``final/``, each kept as a grid archive keeps a
cell; archiving again adds what ended since and changes nothing archived."""
from __future__ import annotations

import json
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from ...config.searches import FINAL, PROGRESS, RECORD, TRIALS, SearchSpec, read_search, trial_dir
from ...errors import ConfigError, RunDirError
from ...storage.atomic import atomic_write_bytes, atomic_write_text
from ...storage.ownership import ARCHIVE_MARKER, IGNORED, check_writable, mark
from .archive import Outcome, plan
from .searches import read_study
from .study_file import ENDED, STUDY_FILE, as_text, read_record, study_record

REPLACED = "nothing was archived (an archived record is never replaced: choose a new --archive folder for this one)"


@dataclass(frozen=True)
class Archived:
    """Each run's outcome (``trials/NNNN/seed=S``, ``final/CELL``), the trials archived and how many had not ended."""

    outcomes: list[Outcome]
    trials: int
    not_ended: int


def archive_search(search_dir: str | Path, directory: str | Path) -> Archived:
    """Archive the search in ``search_dir`` into ``directory``; RunDirError or ConfigError, archiving nothing."""
    search_dir, directory = Path(search_dir), Path(directory)
    if search_dir.resolve() in (directory.resolve(), *directory.resolve().parents):
        raise ConfigError(f"--archive {directory} is inside the search {search_dir}: choose a folder outside it")
    spec = read_search(search_dir)
    spec_bytes = (search_dir / RECORD).read_bytes()
    record = json.loads(as_text(study_record(read_study(spec, search_dir, "nothing archived"))))
    progress = (search_dir / PROGRESS).read_bytes() if (search_dir / PROGRESS).is_file() else None
    check_writable(directory, ARCHIVE_MARKER, "--archive")
    differs = _difference(directory, spec, record, progress)
    if differs is not None:
        raise RunDirError(f"--archive {directory}: {differs} differs from the record archived there; {REPLACED}")
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
    atomic_write_text(directory / STUDY_FILE, as_text(record))
    return Archived(outcomes, len(record["trials"]), sum(trial["state"] not in ENDED for trial in record["trials"]))


def _difference(directory: Path, spec: SearchSpec, record: dict[str, Any], progress: Optional[bytes]) -> Optional[str]:
    """What of the search differs from the archive in ``directory`` (None: nothing, or no archive yet)."""
    if not (directory / RECORD).is_file():
        if directory.is_dir() and any(entry.name not in {*IGNORED, ARCHIVE_MARKER} for entry in directory.iterdir()):
            raise RunDirError(f"--archive {directory}: is an archive of a grid's records, not of a search; choose a "
                              "new or empty --archive folder, nothing was changed")
        return None
    changed = spec.differences(read_search(directory))
    if changed:
        return f"{RECORD} ({', '.join(changed)})"
    if (directory / PROGRESS).is_file() and not (progress or b"").startswith((directory / PROGRESS).read_bytes()):
        return PROGRESS
    if not (directory / STUDY_FILE).is_file():
        return None
    archived = read_record(directory / STUDY_FILE, f"--archive {directory}")
    if any(archived.get(key) != record[key] for key in ("study", "directions", "user_attrs")):
        return f"{STUDY_FILE} (the study's name, direction or attributes)"
    live = {trial["number"]: _canonical(trial) for trial in record["trials"]}
    for trial in archived["trials"]:
        number = trial.get("number")
        if number not in live or (trial.get("state") in ENDED and _canonical(trial) != live[number]):
            return f"{STUDY_FILE} (trial {number})"
    return None


def _canonical(trial: dict[str, Any]) -> str:
    """A trial's record as text, compared as text (a NaN equals itself)."""
    return json.dumps(trial, sort_keys=True)
