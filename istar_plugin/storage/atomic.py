"""Atomic writes: a file is replaced whole or not at all (a temporary beside it, fsync'ed and renamed onto it)."""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Optional

from ..errors import RunDirError

PathLike = str | os.PathLike


STORAGE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO})


def write_failure(path: PathLike, error: BaseException) -> Optional[RunDirError]:
    """The one-line error for a write to ``path`` the storage refused (also wrapped by a writer); else None."""
    number = _storage_errno(error)
    if number is None:
        return None
    return RunDirError(f"{path}: cannot be written ({os.strerror(number).lower()}); the file it would have "
                       "replaced, if any, is unchanged")


def _storage_errno(error: Optional[BaseException]) -> Optional[int]:
    while error is not None:
        if isinstance(error, OSError) and error.errno in STORAGE_ERRORS:
            return error.errno
        named = OS_ERROR.search(str(error))
        if named and int(named[1]) in STORAGE_ERRORS:
            return int(named[1])
        error = error.__cause__ or error.__context__
    return None


OS_ERROR = re.compile(r"\(os error (\d+)\)")


@contextlib.contextmanager
def atomic_file(path: PathLike) -> Iterator[BinaryIO]:
    """Yield a temp file beside ``path``; on success fsync it and rename it onto ``path``, on failure delete it."""
    target = Path(path)
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # respects the umask
        try:
            with os.fdopen(descriptor, "wb") as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    except (OSError, RuntimeError) as error:
        refused = write_failure(target, error)
        if refused is None:
            raise
        raise refused from None
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically; returns the path."""
    with atomic_file(path) as handle:
        handle.write(data)
    return Path(path)


def atomic_write_text(path: PathLike, text: str) -> Path:
    """Replace ``path`` with UTF-8 ``text`` atomically; returns the path."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: PathLike, obj: Any, allow_nan: bool = True) -> Path:
    """Replace ``path`` with ``obj`` as JSON (indent 2, sorted keys) atomically; returns the path.
    ``allow_nan=False``: a NaN or infinity is a ValueError, and nothing is written."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=allow_nan) + "\n")


def atomic_torch_save(obj: Any, path: PathLike) -> Path:
    """``torch.save(obj, path)``, atomically; returns the path."""
    import torch

    with atomic_file(path) as handle:
        torch.save(obj, handle)
    return Path(path)


def sha256_of(path: PathLike) -> str:
    """The SHA-256 of a file's bytes, read in blocks."""
    sha256 = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 22):
            sha256.update(block)
    return sha256.hexdigest()


TEMPORARY = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Delete the atomic-write temp files in ``directory`` (only while holding the run's lock); returns them."""
    if not directory.is_dir():
        return []
    stale = [path for path in directory.iterdir() if TEMPORARY.fullmatch(path.name) and path.is_file()]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale
