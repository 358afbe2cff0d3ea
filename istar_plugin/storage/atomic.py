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
OS_ERROR = re.compile(r"\(os error (\d+)\)")


@contextlib.contextmanager
def write_refusals(path: PathLike, errors: tuple[type[BaseException], ...] = (OSError,)) -> Iterator[None]:
    """Turn ``errors`` by which the storage refused a write to ``path`` (also wrapped by a writer) into one line."""
    try:
        yield
    except errors as error:
        cause: Optional[BaseException] = error
        while cause is not None:
            named = OS_ERROR.search(str(cause))
            for number in (cause.errno if isinstance(cause, OSError) else None, named and int(named[1])):
                if number in STORAGE_ERRORS:
                    raise RunDirError(f"{path}: cannot be written ({os.strerror(number).lower()}); the file it would "
                                      "have replaced, if any, is unchanged") from None
            cause = cause.__cause__ or cause.__context__
        raise


@contextlib.contextmanager
def atomic_file(path: PathLike) -> Iterator[BinaryIO]:
    """Yield a temp file beside ``path``; on success fsync it and rename it onto ``path``, on failure delete it."""
    target = Path(path)
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    with write_refusals(target, (OSError, RuntimeError)):
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
    try:  # the rename made durable
        descriptor = os.open(target.parent, os.O_RDONLY)
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
    """Replace ``path`` with ``obj`` as JSON (indent 2, sorted keys) atomically; returns the path."""
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


def remove_stale_temporaries(directory: Path) -> None:
    """Delete the atomic-write temp files in ``directory`` (only while holding the run's lock)."""
    for path in directory.glob(".*.tmp"):
        if TEMPORARY.fullmatch(path.name) and path.is_file():
            path.unlink(missing_ok=True)
