"""``results.json``: the typed, versioned record a run leaves behind (:func:`write_results`, :func:`read_results`); a
file without ``schema_version`` is version 1, and unknown keys (hooks') are kept in :attr:`ResultsRecord.extra`."""
from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from ..errors import DataError, RunDirError, one_line
from .atomic import atomic_write_json
from .reading import read_bytes

SCHEMA_VERSION = 2

RESULTS = "results.json"
STATUSES = ("finished", "failed")
FROM_FINAL_EVALUATION = ("embedding_i1", "embedding_i2", "collapsed", "cls_isoscore", "cls_explained_variance")
"""Written at top level exactly when the final evaluation (``metrics``) holds them, even as null."""
ALWAYS_WRITTEN = ("step", "epoch", "metrics", "main_metric", "label_names", "init_from", "trainable_parameters",
                  "initial", "history", "eval_isoscore_star", "eval_isoscore_star_per_layer")
"""A finished record's keys that are written even when null."""


class ResultsError(DataError):
    """``results.json`` is missing, malformed, too new, or records a failed run where a finished one is needed."""

    def __init__(self, path: str | os.PathLike, problem: str, missing: bool = False, failed: bool = False):
        self.path, self.problem, self.missing, self.failed = Path(path), one_line(problem), missing, failed
        super().__init__(f"{self.path.parent}: {self.problem}")


_KINDS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "number": (numbers.Real,), "bool": (bool,),
                                       "dict": (dict,), "list": (list, tuple)}


def _check(path: Path, label: str, value: Any, kind: str, optional: bool = True) -> Any:
    if value is None and optional:
        return None
    wrong_bool = isinstance(value, bool) and kind in ("int", "number")
    if value is None or wrong_bool or not isinstance(value, _KINDS[kind]):
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        found = "missing" if value is None else f"a {type(value).__name__} ({shown})"
        article = "an" if kind[0] in "aeiou" else "a"
        raise ResultsError(path, f"{RESULTS}: {label} should be {article} {kind}, is {found}")
    return value


@dataclass(frozen=True)
class ResultsRecord:
    """Everything ``results.json`` holds (sequences as tuples); ``top_level_metrics``: the metrics also copied beside
    ``metrics``; ``extra``: any other key (a hook's results), kept as is."""

    status: str
    task: str
    model: str
    criterion: dict
    seed: int
    reason: Optional[str] = None
    step: Optional[int] = None
    epoch: Optional[int] = None
    metrics: dict = field(default_factory=dict)
    main_metric: Optional[str] = None
    label_names: Optional[tuple] = None
    init_from: Optional[str] = None
    trainable_parameters: Optional[int] = None
    initial: Optional[dict] = None
    history: tuple = ()
    eval_isoscore_star: Optional[float] = None
    eval_isoscore_star_per_layer: Optional[tuple] = None
    embedding_i1: Optional[float] = None
    embedding_i2: Optional[float] = None
    embedding_i1_before: Optional[float] = None
    embedding_i2_before: Optional[float] = None
    collapsed: Optional[bool] = None
    cls_isoscore: Optional[float] = None
    cls_explained_variance: Optional[tuple] = None
    validation: Optional[dict] = None
    top_level_metrics: tuple = ()
    extra: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    path: Path = field(default=Path(RESULTS), compare=False, repr=False)  # where it was read from

    def __post_init__(self) -> None:
        # a metric named as a record key (step, collapsed, ...) stays in metrics only: a copy would overwrite the key
        object.__setattr__(self, "top_level_metrics",
                           tuple(name for name in self.top_level_metrics if name not in _ON_DISK))

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    def require_finished(self) -> "ResultsRecord":
        """This record if the run finished, else raise the failed run's :class:`ResultsError`."""
        if not self.finished:
            raise ResultsError(self.path,
                               f"failed: {self.reason or 'no reason recorded'} ({RESULTS} status: failed)", failed=True)
        return self

    def error(self, problem: str) -> ResultsError:
        """A :class:`ResultsError` about this record (for a reader's own checks)."""
        return ResultsError(self.path, f"{RESULTS}: {problem}")

    def check(self, label: str, value: Any, kind: str, optional: bool = False) -> Any:
        """``value`` (this record's ``label``) if of ``kind``, else the error :func:`read_results` gives."""
        return _check(self.path, label, value, kind, optional)

    def metric(self, name: str) -> Any:
        """The final value of metric ``name``: from ``metrics``, else a top-level key (older files), else None."""
        if name in self.metrics:
            return self.metrics[name]
        return getattr(self, name) if name in _OPTIONAL else self.extra.get(name)

    def finite_metric(self, name: str, label: Optional[str] = None) -> float:
        """:meth:`metric` as a float; an error when it is missing, not a number or not finite."""
        value = self.check(label or f"metric {name!r}", self.metric(name), "number")
        if not math.isfinite(value):
            raise self.error(f"{label or f'metric {name!r}'} is {value}")
        return float(value)

    def to_json(self) -> dict[str, Any]:
        """The on-disk object: the trainer's keys as always, plus ``schema_version``."""
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "status": self.status, "task": self.task,
                               "model": self.model, "criterion": self.criterion, "seed": self.seed}
        for name in _OPTIONAL:
            value = getattr(self, name)
            empty = value is None or (isinstance(value, (tuple, dict)) and not value)
            written = not empty or (self.finished and name in ALWAYS_WRITTEN) or (
                name in FROM_FINAL_EVALUATION and name in self.metrics)
            if written:
                out[name] = list(value) if isinstance(value, tuple) else value
        out.update(self.extra)
        out.update({name: self.metrics[name] for name in self.top_level_metrics if name in self.metrics})
        return out


_KIND_OF = {"str": "str", "int": "int", "float": "number", "bool": "bool", "dict": "dict", "tuple": "list"}
_OPTIONAL = {f.name: _KIND_OF[f.type.removeprefix("Optional[").removesuffix("]")] for f in fields(ResultsRecord)[5:-4]}
_ON_DISK = {"schema_version", "status", "task", "model", "criterion", "seed", *_OPTIONAL}


def failed_record(reason: str, task: str, model: str, criterion: dict, seed: int) -> ResultsRecord:
    """The record of a run that failed: why, and which run, with no metric a reader could take for a result."""
    return ResultsRecord("failed", task, model, criterion, seed, reason=reason)


def _same(a: Any, b: Any) -> bool:
    return a is b or a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def read_results(path: str | os.PathLike, require_finished: bool = False, strict: bool = True
                 ) -> Optional[ResultsRecord]:
    """The record in ``path`` (a ``results.json``, or a run directory holding one). ``strict=False``: None where
    ``strict`` raises :class:`ResultsError`; an unreadable file, or a folder named ``results.json``, is a
    RunDirError."""
    path = Path(path)
    try:
        record = _read(path / RESULTS if path.is_dir() and path.name != RESULTS else path)
        return record.require_finished() if require_finished else record
    except ResultsError:
        if strict:
            raise
        return None


def _read(path: Path) -> ResultsRecord:
    try:
        data = json.loads(read_bytes(path, "run record", RunDirError).decode("utf-8"))
    except FileNotFoundError:
        raise ResultsError(path, f"no {RESULTS} (the run has not finished)", missing=True) from None
    except UnicodeDecodeError as error:
        raise ResultsError(path, f"unreadable {RESULTS}: {error}") from None
    except ValueError as error:
        raise ResultsError(path, f"unreadable {RESULTS}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ResultsError(path, f"{RESULTS} holds a {type(data).__name__}, not an object")
    version = data.get("schema_version", 1)
    _check(path, "schema_version", version, "int")
    if version > SCHEMA_VERSION:
        raise ResultsError(path, f"{RESULTS} has schema_version {version}, newer than this istar_plugin reads "
                                 f"({SCHEMA_VERSION}): upgrade istar_plugin")
    if version < 1:
        raise ResultsError(path, f"{RESULTS}: schema_version should be 1 or more, is {version}")
    status = data.get("status", "finished" if version == 1 else None)
    if status not in STATUSES:
        raise ResultsError(path, f"{RESULTS}: status should be finished or failed, is "
                                 f"{'missing' if status is None else repr(status)}")
    values: dict[str, Any] = {"status": status}
    for name, kind in (("task", "str"), ("model", "str"), ("criterion", "dict"), ("seed", "int")):
        values[name] = _check(path, name, data.get(name), kind, optional=False)
    required = {"failed": ("reason",), "finished": ("step", "metrics", "main_metric")}[status] if version >= 2 else ()
    for name, kind in _OPTIONAL.items():
        value = _check(path, name, data.get(name), kind, optional=name not in required)
        if value is not None:
            values[name] = tuple(value) if kind == "list" else value
    metrics = values.get("metrics", {})
    unknown = [key for key in data if key not in _ON_DISK]
    values["top_level_metrics"] = tuple(key for key in unknown if key in metrics and _same(data[key], metrics[key]))
    values["extra"] = {key: data[key] for key in unknown if key not in values["top_level_metrics"]}
    return ResultsRecord(**values, schema_version=version, path=path)


def write_results(path: str | os.PathLike, record: ResultsRecord) -> Path:
    """Write ``record`` to ``path`` atomically; returns the path."""
    return atomic_write_json(path, record.to_json())


def recorded_precision(run: Path | ResultsRecord) -> Optional[str]:
    """The precision a run recorded in its ``results.json`` (of a run directory, or read already), or None."""
    record = run if isinstance(run, ResultsRecord) else read_results(run, strict=False)
    return None if record is None else record.extra.get("precision")
