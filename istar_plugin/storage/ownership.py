"""What the toolkit wrote: a command writes only into a folder that is new, empty, or carries the toolkit's marker
for that kind of folder (:data:`KINDS`); anything else is refused in one RunDirError line."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..errors import RunDirError
from .atomic import atomic_write_text
from .lock import LOCK_NAME

RUN_MARKER = ".istar-run"
EXPORT_MARKER = ".istar-export"
GRID_MARKER = ".istar-grid"
REPORT_MARKER = ".istar-report"
ANALYSIS_MARKER = ".istar-analysis"
EMBED_MARKER = ".istar-embed"
ARCHIVE_MARKER = ".istar-archive"
SEARCH_MARKER = ".istar-search"
KINDS = {RUN_MARKER: "run directory", EXPORT_MARKER: "model export", GRID_MARKER: "grid directory",
         REPORT_MARKER: "report folder", ANALYSIS_MARKER: "analysis folder", EMBED_MARKER: "embedding evaluation",
         ARCHIVE_MARKER: "archive of grid records", SEARCH_MARKER: "search directory"}
"""What each marker makes a folder, in messages."""
IGNORED = frozenset({LOCK_NAME})
"""Entries that make no folder foreign: the run lock, which any command may have just created."""


def owned(directory: str | os.PathLike, marker: str) -> bool:
    """Whether ``directory`` carries ``marker``, or is that kind of folder by its files (:data:`LEGACY`)."""
    directory = Path(directory)
    return (directory / marker).is_file() or (marker in LEGACY and LEGACY[marker](directory))


LEGACY = {
    RUN_MARKER: lambda d: (d / "cell.yaml").is_file() or all((d / name).is_file()
                                                             for name in ("config.yaml", "metrics.jsonl")),
    EXPORT_MARKER: lambda d: (d.name == "model" or d.name.startswith("model_step_")) and owned(d.parent, RUN_MARKER),
    GRID_MARKER: lambda d: (d / "manifest.json").is_file() or any((c / "cell.yaml").is_file() for c in d.iterdir()),
    REPORT_MARKER: lambda d: (d / "cells.csv").is_file(),
    ANALYSIS_MARKER: lambda d: (d / "figure6.png").is_file(),
}
"""How the kinds older than the markers are recognised without one."""


def check_writable(directory: str | os.PathLike, marker: str, what: str) -> None:
    """Refuse ``directory`` unless it is new, empty (but for a lock) or ``owned`` with ``marker``."""
    directory = Path(directory)
    if not directory.exists():
        return
    if not directory.is_dir():
        raise RunDirError(f"{what} {directory}: exists and is not a directory; choose another {what}")
    entries = sorted(entry.name for entry in directory.iterdir() if entry.name not in IGNORED)
    if entries and not owned(directory, marker):
        other = next((kind for mark_, kind in KINDS.items() if mark_ != marker and owned(directory, mark_)), None)
        if other:
            raise RunDirError(f"{what} {directory}: is {_a(other)}, not {_a(KINDS[marker])}; choose a new or empty "
                              f"{what}, nothing was changed")
        shown = ", ".join(entries[:3]) + (f", ... ({len(entries)} entries)" if len(entries) > 3 else "")
        raise RunDirError(f"{what} {directory}: exists and holds files istar_plugin did not write ({shown}); "
                          f"choose a new or empty {what}, nothing was changed")


def _a(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def mark(directory: str | os.PathLike, marker: str, **details: Any) -> Path:
    """Write ``marker`` into ``directory`` (created if needed): JSON of ``details`` and the time."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(directory / marker, json.dumps({**details, "time": time.time()}, sort_keys=True) + "\n")
