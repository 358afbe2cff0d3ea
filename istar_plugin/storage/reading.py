"""Reading the files a user names: what the OS refuses (but a missing file) is one line in the caller's error class."""
from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Iterator, Optional

from ..errors import DataError, RunError

CONFIG_FILE_BYTES = 1 << 20


def cannot_read(path: str | os.PathLike, what: str, error: OSError | UnicodeDecodeError) -> str:
    """The one line for ``error`` raised while reading ``what`` at ``path``."""
    return f"cannot read {what} {path}: {_cause(Path(path), error)}"


def _cause(path: Path, error: OSError | UnicodeDecodeError) -> str:
    if isinstance(error, UnicodeDecodeError):
        return f"not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start}); save it as UTF-8"
    if error.errno in (errno.EACCES, errno.EPERM):
        denied = Path(os.path.abspath(error.filename if error.filename else path))
        denied = blocked_folder(denied) or denied  # the folder that stops the way to the file, else the file
        if denied == Path(os.path.abspath(path)):
            return "permission denied (check its mode and owner)"
        if denied in Path(os.path.abspath(path)).parents:
            return f"permission denied on its folder {denied} (check that folder's mode and owner)"
        return f"permission denied on {denied} (check its mode and owner)"
    if error.errno == errno.EISDIR:
        return "it is a folder, not a file (name a file)"
    if error.errno == errno.ENOTDIR:
        return "it is a file, not a folder (name a folder)" if path.is_file() else "a part of its path is not a folder"
    return os.strerror(error.errno).lower() if error.errno else " ".join(str(error).split())


def blocked_folder(path: str | os.PathLike) -> Optional[Path]:
    """The outermost existing folder above ``path`` that this process may not search, or None."""
    for folder in reversed(Path(os.path.abspath(path)).parents):
        if not os.path.isdir(folder):
            return None
        if not os.access(folder, os.X_OK):
            return folder
    return None


@contextlib.contextmanager
def reading(path: str | os.PathLike, what: str, refusal: type[RunError] = DataError) -> Iterator[None]:
    """Turn an OSError (but a missing file) or UnicodeDecodeError inside the block into one ``refusal`` line."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as error:
        raise refusal(cannot_read(path, what, error)) from None


def read_bytes(path: str | os.PathLike, what: str, refusal: type[RunError] = DataError,
               max_bytes: Optional[int] = None) -> bytes:
    """The bytes of the file ``what`` at ``path``; one ``refusal`` line when unreadable or over ``max_bytes``."""
    with reading(path, what, refusal), open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if max_bytes is not None and size > max_bytes:
            raise refusal(f"cannot read {what} {path}: {size} bytes is too large for a {what} (at most {max_bytes}); "
                          "is it the right file?")
        return handle.read()


def read_text(path: str | os.PathLike, what: str, refusal: type[RunError] = DataError,
              max_bytes: Optional[int] = None) -> str:
    """The UTF-8 text of the file ``what`` at ``path``, refused as by :func:`read_bytes` or when not UTF-8."""
    with reading(path, what, refusal):
        return read_bytes(path, what, refusal, max_bytes).decode("utf-8")
