"""A run's logs: ``metrics.jsonl`` (durable JSON lines, read by :func:`read_records`) and TensorBoard event files."""
from __future__ import annotations

import contextlib
import json
import numbers
import os
import time
import warnings
from pathlib import Path
from typing import Any, BinaryIO, Mapping, Optional

from ..errors import RunDirError
from .atomic import PathLike, write_refusals
from .reading import cannot_read


class MetricsLog(contextlib.AbstractContextManager):
    """A JSON-lines file (``path``, or ``path/metrics.jsonl``), each record durable (fsync'ed) once appended."""

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
        with write_refusals(self.path):  # a part written is cut off by the next append
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                data = self.path.read_bytes() if self.path.exists() else b""
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    warnings.warn(f"{self.path}: dropping a truncated last line ({len(data) - keep} bytes) before "
                                  "appending", stacklevel=2)
                    self.truncate(keep)
                self._file = open(self.path, "ab")
            self._file.write(line.encode("utf-8"))
            self._file.flush()
            os.fsync(self._file.fileno())
        return written

    def records(self) -> list[dict[str, Any]]:
        """All complete records in file order (:func:`read_records`, strict)."""
        return read_records(self.path, warn=True)

    def size(self) -> int:
        """The file's length in bytes (0 before the first record)."""
        return self.path.stat().st_size if self.path.exists() else 0

    def truncate(self, size: Optional[int]) -> None:
        """Drop what was appended after the file was ``size`` bytes long (None: keep all)."""
        if size is None or self.size() <= size:
            return
        self.close()
        with open(self.path, "r+b") as handle:
            handle.truncate(size)
            os.fsync(handle.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def json_lines(text: str, where: PathLike, strict: bool = True) -> list[Optional[dict[str, Any]]]:
    """One record per non-blank line of ``text``; a line that is not JSON is a ValueError when ``strict``, else None."""
    records: list[Optional[dict[str, Any]]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError as error:
                if strict:
                    raise ValueError(f"{where}: line {number} is not valid JSON: {error}") from None
                records.append(None)
    return records


def read_records(path: PathLike, strict: bool = True, warn: bool = False) -> list[dict[str, Any]]:
    """The records of the JSON-lines file ``path`` ([] when missing; a last line cut short left out).
    ``strict``: a damaged line is a ValueError and a folder an OSError; else they give no records. A file this
    process may not read is a one-line :class:`RunDirError` whatever the strictness."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except IsADirectoryError:
        if strict:
            raise
        return []
    except OSError as error:
        raise RunDirError(cannot_read(path, "run log", error)) from None
    complete, _, tail = data.rpartition(b"\n")
    if tail and warn:
        warnings.warn(f"{path}: skipping a truncated last line ({len(tail)} bytes) left by an interrupted write",
                      stacklevel=3)
    text = complete.decode("utf-8", errors="strict" if strict else "replace")
    return [record for record in json_lines(text, path, strict) if isinstance(record, dict) or strict]


def last_line(path: PathLike, limit: int = 200) -> str:
    """The last non-blank line of a text file such as a job's log, at most ``limit`` characters (progress bars'
    carriage returns count as line ends); ``""`` for none or an unreadable file."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 8192))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.replace("\r", "\n").split("\n") if line.strip()]
    return lines[-1][:limit] if lines else ""


class TensorBoardLog:
    """Scalars for TensorBoard in ``directory``, the event file created with the first; a no-op unless ``enabled``."""

    def __init__(self, directory: PathLike, enabled: bool = True):
        self.directory = Path(directory)
        self._writer = None
        self.enabled = enabled
        self.purge_step: Optional[int] = None  # hide the events of this step and later that an earlier attempt wrote

    def _open(self):
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.directory), purge_step=self.purge_step)
        return self._writer

    def scalars(self, values: Mapping[str, Any], step: int, prefix: str = "") -> None:
        """Log every numeric value as ``prefix/name`` (or ``name``); other values are skipped."""
        if not self.enabled:
            return
        prefix = prefix.rstrip("/")
        for name, value in values.items():
            if hasattr(value, "numel") and hasattr(value, "is_complex"):  # a tensor, without importing torch
                value = float(value.item()) if value.numel() == 1 and not value.is_complex() else None
            if isinstance(value, numbers.Real) and not isinstance(value, bool):
                self._open().add_scalar(f"{prefix}/{name}" if prefix else name, float(value), global_step=step)

    def config(self, config: Mapping[str, Any], metrics: list[str]) -> None:
        """The run's config as text (tag ``config``) and as hyperparameters against the scalar tags ``metrics``."""
        if not self.enabled:
            return
        import yaml
        from torch.utils.tensorboard.summary import hparams

        text = yaml.safe_dump(dict(config), sort_keys=False)
        self._open().add_text("config", "".join(f"    {line}\n" for line in text.splitlines()), global_step=0)
        flat = {key: value if isinstance(value, (bool, int, float, str)) else str(value)
                for key, value in flat_keys(config).items()}
        for summary in hparams(flat, dict.fromkeys(metrics, 0.0)):
            self._writer.file_writer.add_summary(summary)  # a SummaryWriter opens its file writer when made

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file; later calls log nothing."""
        self.enabled = False
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def flat_keys(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys (an empty mapping stays a value)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            flat.update(flat_keys(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
