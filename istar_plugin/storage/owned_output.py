"""An output folder holding one invocation's files (``istar-embed --out``, ``istar-analyze --out``); its marker lists
the files written, and reuse removes only those."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import RunDirError
from .lock import RunDirLock
from .ownership import IGNORED, check_writable, mark

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
        path = self.directory / self.marker
        if not self.directory.is_dir() or not any(entry.name not in IGNORED for entry in self.directory.iterdir()):
            return []
        try:
            files = json.loads(path.read_text(encoding="utf-8")).get("files")
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
