"""A run directory's exclusive ``flock`` on ``RUN_DIR/.lock``, refused at once to a second process naming the holder."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
import warnings
from pathlib import Path
from typing import Iterator, Optional

from ..errors import RunDirError

LOCK_NAME = ".lock"
_UNSUPPORTED = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)  # a filesystem without file locks
_HELD: dict[str, "RunDirLock"] = {}  # real path of the directory -> the lock this process holds on it


class RunDirInUse(RunDirError):
    """Another live process holds the directory's lock; the message names its host and pid."""


class RunDirLock:
    """``with RunDirLock(directory):`` or ``lock = RunDirLock(directory).acquire(); ...; lock.release()``."""

    def __init__(self, directory: str | os.PathLike, role: str = "output_dir",
                 advice: str = "wait for it to finish or choose another output_dir"):
        self.directory = Path(directory)
        self.role, self.advice = role, advice  # how a refusal names the directory and what it suggests
        self.path = self.directory / LOCK_NAME
        self._descriptor: Optional[int] = None
        self._created: list[Path] = []  # the folders acquire made (the directory and its new parents), deepest first
        self._key: Optional[str] = None  # the real path this lock holds, while it holds the flock
        self._holds = 0  # while it holds the flock: the acquisitions not yet released, of every lock sharing it
        self._acquired = 0  # this object's acquisitions not yet released
        self._holder: Optional["RunDirLock"] = None  # the lock holding the flock (this one or a shared one)

    def acquire(self) -> "RunDirLock":
        key = os.path.realpath(self.directory)
        held = _HELD.get(key)
        if held is not None:  # this process already holds it: share that lock
            held._holds += 1
            self._holder = held
            self._acquired += 1
            return self
        try:
            self._created = [path for path in (self.directory, *self.directory.parents) if not path.exists()]
            self.directory.mkdir(parents=True, exist_ok=True)
            self._descriptor = self._lock()
        except (FileExistsError, NotADirectoryError):
            raise RunDirError(f"output_dir {self.directory} (or a parent) exists and is not a directory; "
                              "choose another output_dir") from None
        except PermissionError as error:
            raise RunDirError(f"output_dir {self.directory} is not writable ({error.strerror}); "
                              "choose another output_dir") from None
        except OSError as error:
            if error.errno not in _UNSUPPORTED:
                raise RunDirError(f"output_dir {self.directory} cannot be used ({error.strerror})") from None
            warnings.warn(f"{self.directory}: this filesystem refuses file locks ({error.strerror}); running unlocked, "
                          "so make sure no other run uses this output_dir", stacklevel=2)
        self._key, self._holds, self._holder, self._acquired = key, 1, self, 1
        _HELD[key] = self
        return self

    def _lock(self) -> Optional[int]:
        while True:
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(descriptor)
                os.close(descriptor)
                raise RunDirInUse(f"{self.role} {self.directory} is in use by another run ({holder}); "
                                  f"{self.advice}") from None
            except BaseException:
                os.close(descriptor)
                raise
            try:
                same = os.stat(self.path).st_ino == os.fstat(descriptor).st_ino
            except FileNotFoundError:
                same = False
            if same:
                record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()})
                os.ftruncate(descriptor, 0)
                os.pwrite(descriptor, (record + "\n").encode(), 0)
                return descriptor
            os.close(descriptor)  # the holder released and deleted it between our open and our flock: retry

    def release(self) -> None:
        """Undo one :meth:`acquire` of this object (nothing once all are undone); the last acquisition in this
        process released, of this object or of any sharing it, unlocks the directory."""
        if self._acquired == 0:
            return
        self._acquired -= 1
        holder = self._holder
        if self._acquired == 0:
            self._holder = None
        holder._holds -= 1
        if holder._holds == 0:
            holder._unlock()

    def _unlock(self) -> None:
        if _HELD.get(self._key) is self:
            del _HELD[self._key]
        self._key = None
        if self._descriptor is not None:
            self.path.unlink(missing_ok=True)  # while still locked: nobody can be holding this file
            os.close(self._descriptor)
            self._descriptor = None
        with contextlib.suppress(OSError):  # each only while nothing else was written into it
            for folder in self._created:
                folder.rmdir()

    def __enter__(self) -> "RunDirLock":
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()


def held_here(directory: str | os.PathLike) -> bool:
    """Whether this process holds ``directory``'s lock (a second :class:`RunDirLock` would share it)."""
    return os.path.realpath(directory) in _HELD


def holder(directory: str | os.PathLike) -> Optional[str]:
    """``host H, pid P, since T`` of another process holding ``directory``'s lock, else None."""
    if os.path.realpath(directory) in _HELD:
        return None
    try:
        descriptor = os.open(Path(directory) / LOCK_NAME, os.O_RDONLY)
    except OSError:  # no lock file: no holder (a holder keeps the file until it releases)
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(descriptor)
    except OSError as error:
        if error.errno not in _UNSUPPORTED:
            raise
    finally:
        os.close(descriptor)  # releases the probe's lock
    return None


@contextlib.contextmanager
def waiting_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created and kept), waiting for it."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except OSError as error:
            if error.errno not in _UNSUPPORTED:
                raise
        yield
    finally:
        os.close(descriptor)


def _read_holder(descriptor: int) -> str:
    try:
        record = json.loads(os.pread(descriptor, 4096, 0).decode() or "{}")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record["since"]))
        return f"host {record['host']}, pid {record['pid']}, since {started}"
    except (ValueError, KeyError, TypeError, OSError):
        return "holder unknown"
