"""Checkpoints with a SHA-256 (``sha256sum`` format) beside each, verified before loading; :class:`Checkpoints`."""
from __future__ import annotations

import hashlib
import io
import numbers
import re
import warnings
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from ..errors import CheckpointError
from .atomic import PathLike, atomic_file, atomic_write_text, sha256_of


class _HashingWriter(io.RawIOBase):
    """A write-only file that hashes what it passes on to ``handle``."""

    def __init__(self, handle):
        self.handle, self.sha256 = handle, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        written = self.handle.write(data)
        self.sha256.update(memoryview(data)[:written])
        return written


def digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def save_verified(obj: Any, path: Path) -> Path:
    """``torch.save(obj, path)`` atomically, with ``path.sha256`` written before the checkpoint appears."""
    path = Path(path)
    with atomic_file(path) as handle:
        writer = _HashingWriter(handle)
        try:
            torch.save(obj, writer)
        except RuntimeError as error:  # the writer closed after an exit (a requeue, Ctrl-C) cut a record short
            if isinstance(error.__context__, (SystemExit, KeyboardInterrupt)):
                raise error.__context__ from None
            raise
        atomic_write_text(digest_path(path), f"{writer.sha256.hexdigest()}  {path.name}\n")
    return path


def problem(path: Path) -> Optional[str]:
    """Why ``path`` cannot be trusted, or None when its bytes match its SHA-256 (or it has none and is not empty)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    if size == 0:
        return "it is empty (0 bytes)"
    recorded = digest_path(path)
    if recorded.is_file() and recorded.read_text(encoding="utf-8", errors="replace").split()[:1] != [sha256_of(path)]:
        return f"its SHA-256 does not match {recorded.name} (damaged bytes)"
    return None


def _load(path: Path, map_location: Any, keys: Sequence[str] = ()) -> tuple[Any, Optional[str]]:
    reason = problem(path)
    if reason is None:
        try:
            state = torch.load(path, map_location=map_location, weights_only=False)
        except Exception as error:  # truncated or garbled bytes of a checkpoint without a checksum
            reason = f"it cannot be loaded ({type(error).__name__}: {' '.join(str(error).split())[:160]})"
        else:
            if not isinstance(state, dict):
                return None, f"it holds a {type(state).__name__}, not a checkpoint's dict"
            if missing := [key for key in keys if key not in state]:
                return None, f"it is not a run's checkpoint (no {', '.join(missing)})"
            return state, None
    return None, reason


class DamagedCheckpoint(CheckpointError):
    """A checkpoint file that cannot be trusted or loaded, or is no checkpoint; ``reason`` says why."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: damaged ({reason})")
        self.path, self.reason = Path(path), reason


def read_checkpoint(path: PathLike, map_location: Any = "cpu", keys: Sequence[str] = ()) -> dict[str, Any]:
    """The state in the checkpoint file ``path``, its SHA-256 verified and ``keys`` present (nothing renamed); a
    damaged or foreign file is a :class:`DamagedCheckpoint`."""
    state, reason = _load(Path(path), map_location, keys)
    if reason is not None:
        raise DamagedCheckpoint(path, reason)
    return state


class Checkpoints:
    """``directory/checkpoints/step_XXXXXXXX.pt`` files, saved atomically; only the newest ``keep_last`` are kept."""

    PATTERN = re.compile(r"step_(\d+)\.pt")

    def __init__(self, directory: PathLike, keep_last: int = 2):
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise ValueError(f"keep_last must be an integer >= 1, got {keep_last!r}")
        self.directory = Path(directory) / "checkpoints"
        self.keep_last = keep_last

    def save(self, state: dict[str, Any], step: int) -> Path:
        """Write ``state`` as the checkpoint of ``step``, then delete all but the ``keep_last`` highest steps."""
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(f"checkpoint step must be an integer >= 0, got {step!r}")
        self.directory.mkdir(parents=True, exist_ok=True)
        path = save_verified(state, self.directory / f"step_{int(step):08d}.pt")
        self.keep_newest(self.keep_last)
        return path

    def paths(self) -> dict[int, Path]:
        """Every checkpoint by step, in increasing order."""
        found = {self.step_of(p): p for p in self.directory.glob("step_*.pt") if self.PATTERN.fullmatch(p.name)}
        return dict(sorted(found.items()))

    @classmethod
    def step_of(cls, path: Path) -> int:
        """The step in a checkpoint's file name."""
        return int(cls.PATTERN.fullmatch(path.name)[1])

    def keep_newest(self, count: int) -> None:
        """Delete all but the ``count`` highest steps (0: every checkpoint), each with its SHA-256 file."""
        checkpoints = list(self.paths().values())
        for old in checkpoints[: max(0, len(checkpoints) - count)]:
            old.unlink(missing_ok=True)
            digest_path(old).unlink(missing_ok=True)

    def latest(self) -> Optional[Path]:
        """The checkpoint with the highest step, or None."""
        return max(self.paths().items(), default=(None, None))[1]

    def load_step(self, step: int, map_location: Any = "cpu") -> dict[str, Any]:
        """The state of the checkpoint of ``step``; a missing or damaged one is a CheckpointError (nothing renamed)."""
        path = self.paths().get(step)
        if path is None:
            raise CheckpointError(f"{self.directory}: no checkpoint of step {step}; steps: "
                                  f"{', '.join(map(str, self.paths())) or 'none'}")
        return read_checkpoint(path, map_location)

    def load_latest(self, map_location: Any = "cpu") -> Optional[dict[str, Any]]:
        """The newest intact checkpoint's state, or None; a damaged one is renamed ``NAME.damaged`` with a warning."""
        damaged = []
        for path in reversed(self.paths().values()):
            state, reason = _load(path, map_location)
            if reason is None:
                return state
            damaged.append(f"{path.name}: {reason}")
            path.rename(path.with_name(path.name + ".damaged"))
            warnings.warn(f"checkpoint {path} is damaged ({reason}); renamed to {path.name}.damaged, "
                          "falling back to the next newest", stacklevel=2)
        if damaged:
            raise CheckpointError(f"{self.directory}: no intact checkpoint to resume from ({'; '.join(damaged)}); "
                                  "move the checkpoints directory aside to start the run afresh")
        return None
