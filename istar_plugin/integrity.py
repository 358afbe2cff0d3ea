"""Checkpoint files that prove they are intact: a SHA-256 written beside each, verified before loading.

``save_verified`` hashes the bytes as ``torch.save`` writes them and puts ``NAME.sha256`` (the format of
``sha256sum``, so ``sha256sum -c`` checks it too) beside the checkpoint before the checkpoint is renamed
into place. ``problem`` says what is wrong with a file (empty, truncated, damaged bytes) or None.
``remove_stale_temporaries`` deletes the temp files a kill during an atomic write leaves behind.

>>> import tempfile
>>> directory = Path(tempfile.mkdtemp())
>>> path = save_verified({"step": 3}, directory / "step_3.pt")
>>> problem(path) is None, (directory / "step_3.pt.sha256").read_text().endswith("  step_3.pt\\n")
(True, True)
>>> data = bytearray(path.read_bytes()); data[40] ^= 0xFF; _ = path.write_bytes(bytes(data))
>>> problem(path)
'its SHA-256 does not match step_3.pt.sha256 (damaged bytes)'
"""
from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path
from typing import Any, Optional

import torch

from .rundir import _atomic_file, atomic_write_text

DIGEST_SUFFIX = ".sha256"
TEMPORARY = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")  # the temp files of rundir's atomic writes
CHUNK = 1 << 22


class _HashingWriter(io.RawIOBase):
    """A write-only file that hashes what passes through it on the way to ``handle``."""

    def __init__(self, handle):
        self.handle, self.sha256 = handle, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        written = self.handle.write(data)
        self.sha256.update(memoryview(data)[:written])
        return written


def digest_path(path: Path) -> Path:
    return path.with_name(path.name + DIGEST_SUFFIX)


def save_verified(obj: Any, path: Path) -> Path:
    """``torch.save(obj, path)`` atomically, with ``path.sha256`` written before the checkpoint appears."""
    path = Path(path)
    with _atomic_file(path) as handle:
        writer = _HashingWriter(handle)
        torch.save(obj, writer)
        atomic_write_text(digest_path(path), f"{writer.sha256.hexdigest()}  {path.name}\n")
    return path


def sha256_of(path: Path) -> str:
    sha256 = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            sha256.update(chunk)
    return sha256.hexdigest()


def problem(path: Path) -> Optional[str]:
    """Why ``path`` cannot be trusted, or None when its bytes match its recorded SHA-256.

    A checkpoint without a ``.sha256`` (written by an older version) is checked only for being non-empty.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    if size == 0:
        return "it is empty (0 bytes)"
    recorded = digest_path(path)
    if not recorded.is_file():
        return None
    expected = recorded.read_text(encoding="utf-8", errors="replace").split()[:1]
    if expected != [sha256_of(path)]:
        return f"its SHA-256 does not match {recorded.name} (damaged bytes)"
    return None


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Delete the atomic-write temp files in ``directory`` (call only while holding the run's lock); returns them."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    stale = [path for path in directory.iterdir() if TEMPORARY.fullmatch(path.name) and path.is_file()]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale
