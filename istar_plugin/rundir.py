"""The run directory's files, written so that a crash never leaves a half-written file behind.

>>> import tempfile
>>> run = Path(tempfile.mkdtemp())
>>> _ = atomic_write_json(run / "config.json", {"lr": 2e-5, "seed": 1})
>>> (run / "config.json").read_text()
'{\\n  "lr": 2e-05,\\n  "seed": 1\\n}\\n'
>>> with MetricsLog(run) as log:
...     _ = log.append({"step": 10, "loss": 0.5})
>>> [record["loss"] for record in log.records()]
[0.5]
>>> checkpoints = Checkpoints(run, keep_last=1)
>>> _ = checkpoints.save({"step": 10}, step=10); _ = checkpoints.save({"step": 20}, step=20)
>>> checkpoints.latest().name, checkpoints.load_latest()["step"]
('step_00000020.pt', 20)
"""
from __future__ import annotations

import contextlib
import json
import numbers
import os
import re
import secrets
import time
import warnings
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Mapping, Optional

import torch

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_torch_save",
    "MetricsLog",
    "Checkpoints",
    "TensorBoardLog",
]

PathLike = str | os.PathLike


@contextlib.contextmanager
def _atomic_file(path: PathLike) -> Iterator[BinaryIO]:
    """Yield a temp file beside ``path``; on success fsync it and rename it onto ``path``, on failure delete it."""
    target = Path(path)
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    # os.open with mode 0o666 respects the umask (tempfile would make the target owner-only).
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX); a no-op where directories cannot be opened (Windows)."""
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
    with _atomic_file(path) as handle:
        handle.write(data)
    return Path(path)


def atomic_write_text(path: PathLike, text: str) -> Path:
    """Replace ``path`` with UTF-8 ``text`` atomically; returns the path."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: PathLike, obj: Any) -> Path:
    """Replace ``path`` with ``obj`` as JSON (indent 2, sorted keys, trailing newline) atomically; returns the path."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_torch_save(obj: Any, path: PathLike) -> Path:
    """``torch.save(obj, path)``, atomically (argument order as torch.save); returns the path."""
    with _atomic_file(path) as handle:
        torch.save(obj, handle)
    return Path(path)


class MetricsLog:
    """A JSON-lines file, one object per record, each durable (fsync'ed) once appended.

    ``path`` is the ``.jsonl`` file itself or a directory to hold ``metrics.jsonl``. A line cut short by a
    crash is skipped by :meth:`records` and dropped before the next append.
    """

    FILENAME = "metrics.jsonl"

    def __init__(self, path: PathLike):
        path = Path(path)
        self.path = path if path.suffix == ".jsonl" else path / self.FILENAME
        self._file: Optional[BinaryIO] = None

    def append(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Write ``record`` plus a ``time`` field (seconds since the epoch); returns the written record."""
        if "time" in record:
            raise ValueError(f"metrics record already has a 'time' key ({record['time']!r}); MetricsLog adds it")
        written = {**record, "time": time.time()}
        line = json.dumps(written, sort_keys=True) + "\n"
        if self._file is None:
            self._file = self._open_for_append()
        self._file.write(line.encode("utf-8"))
        self._file.flush()
        os.fsync(self._file.fileno())
        return written

    def records(self) -> list[dict[str, Any]]:
        """All complete records in file order; [] when the file does not exist yet."""
        if not self.path.exists():
            return []
        lines = self.path.read_bytes().split(b"\n")
        complete, tail = lines[:-1], lines[-1]  # tail is b"" unless the last write was cut short
        if tail:
            warnings.warn(f"{self.path}: skipping a truncated last line ({len(tail)} bytes) left by an interrupted write")
        records = []
        for number, line in enumerate(complete, start=1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{self.path}: line {number} is not valid JSON: {error}") from None
        return records

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "MetricsLog":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _open_for_append(self) -> BinaryIO:
        """Open in append mode, first cutting off a partial last line so new records start on a line of their own."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            data = self.path.read_bytes()
            keep = data.rfind(b"\n") + 1
            if keep < len(data):
                warnings.warn(f"{self.path}: dropping a truncated last line ({len(data) - keep} bytes) before appending")
                with open(self.path, "r+b") as handle:
                    handle.truncate(keep)
        return open(self.path, "ab")


class Checkpoints:
    """``directory/checkpoints/step_XXXXXXXX.pt`` files, saved atomically; only the newest ``keep_last`` are kept."""

    PATTERN = re.compile(r"step_(\d+)\.pt")

    def __init__(self, directory: PathLike, keep_last: int = 2):
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise ValueError(f"keep_last must be an integer >= 1, got {keep_last!r}")
        self.directory = Path(directory) / "checkpoints"
        self.keep_last = keep_last

    def save(self, state: dict[str, Any], step: int) -> Path:
        """Write ``state`` as the checkpoint of ``step`` with its SHA-256 beside it, then delete all but the
        ``keep_last`` highest steps."""
        from .integrity import digest_path, save_verified

        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(f"checkpoint step must be an integer >= 0, got {step!r}")
        self.directory.mkdir(parents=True, exist_ok=True)
        path = save_verified(state, self.directory / f"step_{int(step):08d}.pt")
        for old in self._by_step()[: -self.keep_last]:
            old.unlink(missing_ok=True)
            digest_path(old).unlink(missing_ok=True)
        return path

    def paths(self) -> dict[int, Path]:
        """Every checkpoint by step, in increasing order."""
        return {int(self.PATTERN.fullmatch(path.name)[1]): path for path in self._by_step()}

    def keep_newest(self, count: int) -> None:
        """Delete all but the ``count`` highest steps (0: every checkpoint)."""
        checkpoints = self._by_step()
        for old in checkpoints[: max(0, len(checkpoints) - count)]:
            old.unlink(missing_ok=True)

    def latest(self) -> Optional[Path]:
        """The checkpoint with the highest step, or None."""
        checkpoints = self._by_step()
        return checkpoints[-1] if checkpoints else None

    def load_latest(self, map_location: Any = "cpu") -> Optional[dict[str, Any]]:
        """The newest intact checkpoint's state (full unpickling: it holds RNG states and python objects), or None
        when there is no checkpoint.

        A checkpoint whose bytes do not match its SHA-256, or that cannot be unpickled, is renamed to
        ``NAME.damaged`` (kept, never loaded again) with a warning, and the next newest is tried; when none is
        intact, :class:`~istar_plugin.errors.CheckpointError` lists what was wrong with each.
        """
        from .errors import CheckpointError
        from .integrity import problem

        found = self._by_step()
        damaged = []
        for path in reversed(found):
            reason = problem(path)
            if reason is None:
                try:
                    return torch.load(path, map_location=map_location, weights_only=False)
                except Exception as error:  # truncated or garbled bytes of a checkpoint without a checksum
                    reason = f"it cannot be loaded ({type(error).__name__}: {' '.join(str(error).split())[:160]})"
            damaged.append(f"{path.name}: {reason}")
            path.rename(path.with_name(path.name + ".damaged"))
            warnings.warn(f"checkpoint {path} is damaged ({reason}); renamed to {path.name}.damaged, "
                          "falling back to the next newest")
        if damaged:
            raise CheckpointError(f"{self.directory}: no intact checkpoint to resume from ({'; '.join(damaged)}); "
                                  "move the checkpoints directory aside to start the run afresh")
        return None

    def _by_step(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        found = [(int(match[1]), path) for path in self.directory.iterdir() if (match := self.PATTERN.fullmatch(path.name))]
        return [path for _, path in sorted(found)]


class TensorBoardLog:
    """Scalars for TensorBoard in ``directory``; every method is a no-op when ``enabled`` is False (non-zero ranks).

    The event file is created with the first scalar, so a run refused before logging anything leaves none.

    >>> import tempfile
    >>> log = TensorBoardLog(tempfile.mkdtemp())
    >>> log.scalars({"loss": 0.25, "note": "skipped"}, step=1, prefix="train"); log.close()
    """

    def __init__(self, directory: PathLike, enabled: bool = True):
        self.directory = Path(directory)
        self._writer = None
        self._enabled = enabled

    @property
    def enabled(self) -> bool:
        return self._enabled

    def _open(self):
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter  # imported only where it is used: it loads tensorboard

            self._writer = SummaryWriter(log_dir=str(self.directory))
        return self._writer

    def scalars(self, values: Mapping[str, Any], step: int, prefix: str = "") -> None:
        """Log every numeric value as ``prefix/name`` (or ``name``); strings, bools, None, tensors of >1 element are skipped."""
        if not self._enabled:
            return
        prefix = prefix.rstrip("/")
        for name, value in values.items():
            number = _as_number(value)
            if number is not None:
                self._open().add_scalar(f"{prefix}/{name}" if prefix else name, number, global_step=step)

    def config(self, config: Mapping[str, Any], metrics: list[str]) -> None:
        """The run's resolved config as text (tab TEXT, tag ``config``) and as hyperparameters (tab HPARAMS,
        dotted keys) against the scalar tags ``metrics``, in the run's own event file."""
        if not self._enabled:
            return
        import yaml
        from torch.utils.tensorboard.summary import hparams

        text = yaml.safe_dump(dict(config), sort_keys=False)
        self._open().add_text("config", "".join(f"    {line}\n" for line in text.splitlines()), global_step=0)
        flat = {key: value if isinstance(value, (bool, int, float, str)) else str(value) for key, value in _flat(config).items()}
        writer = self._writer._get_file_writer()
        for summary in hparams(flat, dict.fromkeys(metrics, 0.0)):
            writer.add_summary(summary)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file; later calls log nothing."""
        self._enabled = False
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _as_number(value: Any) -> Optional[float]:
    """``value`` as a float if it is a real number or a one-element tensor, else None."""
    if isinstance(value, torch.Tensor):
        return float(value.item()) if value.numel() == 1 and not value.is_complex() else None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def _flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys: ``{"optim": {"lr": 1}}`` -> ``{"optim.lr": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
