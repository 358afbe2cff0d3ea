"""A command writes only into a folder that is new, empty, or carries the marker of its kind (:data:`KINDS`);
:class:`OwnedOutput` is a ``--out`` folder whose marker lists its files, and reuse removes only those."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import RunDirError
from .atomic import atomic_write_text
from .lock import LOCK_NAME, RunDirLock

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
    """Refuse ``directory`` unless it is new (under folders), empty (but for a lock) or ``owned`` with ``marker``."""
    directory = Path(directory)
    if not directory.exists():
        if (existing := next((p for p in directory.parents if p.exists()), None)) and not existing.is_dir():
            raise RunDirError(f"{what} {directory}: {existing} exists and is not a directory; choose another {what}")
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


class OwnedOutput:
    """``with OwnedOutput(directory, marker, "--out") as folder:`` checks and locks ``directory``;
    ``folder.replace(paths)`` before the first write, ``folder.finish(**details)`` after the last."""

    def __init__(self, directory: str | os.PathLike, marker: str, what: str = "--out"):
        self.directory, self.marker, self.what = Path(directory), marker, what
        self.lock: Optional[RunDirLock] = None
        self.planned: list[str] = []

    def check(self) -> None:
        """Refuse a folder this command may not write into (one RunDirError line)."""
        check_writable(self.directory, self.marker, self.what)
        if self.earlier_files() is None:
            raise RunDirError(f"{self.what} {self.directory}: written by an older version, which kept no list of its "
                              f"files; choose a new or empty {self.what}, nothing was changed")

    def earlier_files(self) -> Optional[list[str]]:
        """The files the folder's marker lists ([] for a new or empty folder; None when it lists none)."""
        if not self.directory.is_dir() or not any(entry.name not in IGNORED for entry in self.directory.iterdir()):
            return []
        try:
            files = json.loads((self.directory / self.marker).read_text(encoding="utf-8")).get("files")
        except (OSError, ValueError, AttributeError):
            return None
        return [str(name) for name in files] if isinstance(files, list) else None

    def __enter__(self) -> "OwnedOutput":
        self.check()
        self.lock = RunDirLock(self.directory, role=self.what,
                               advice=f"wait for it to finish or choose another {self.what}").acquire()
        try:
            self.check()  # what another command wrote between the first check and the lock
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def replace(self, paths: Sequence[str | os.PathLike]) -> list[Path]:
        """Record ``paths`` as about to be written, then remove the files the earlier marker lists; returns those.
        A path that exists and the marker does not list (the user's) is refused."""
        self.planned = [self._relative(path) for path in paths]
        earlier = self.earlier_files() or []
        foreign = [name for name in self.planned if name not in earlier and (self.directory / name).exists()]
        if foreign:
            raise RunDirError(f"{self.what} {self.directory}: {foreign[0]} is not a file this command wrote; move it "
                              f"or choose another {self.what}, nothing was changed")
        mark(self.directory, self.marker, files=sorted(set(earlier) | set(self.planned)), complete=False)
        removed = []
        for name in earlier:
            path = self.directory / name
            if path.is_file() or path.is_symlink():
                path.unlink()
                removed.append(path)
                _remove_empty_parents(path.parent, self.directory)
        return removed

    def finish(self, written: Optional[Sequence[str | os.PathLike]] = None, **details: Any) -> Path:
        """The marker listing ``written`` (default: every path given to :meth:`replace`) as complete."""
        files = self.planned if written is None else [self._relative(path) for path in written]
        return mark(self.directory, self.marker, files=sorted(files), complete=True, **details)

    def _relative(self, path: str | os.PathLike) -> str:
        relative = Path(os.path.relpath(os.path.abspath(path), os.path.abspath(self.directory)))
        if ".." in relative.parts:
            raise ValueError(f"{path} is not inside {self.directory}")
        return relative.as_posix()


def _remove_empty_parents(folder: Path, top: Path) -> None:
    while folder != top and top in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
