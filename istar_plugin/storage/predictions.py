"""``predictions.json``: a finished run's per-example predictions and references, for a paired bootstrap."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import DataError, one_line
from .atomic import atomic_write_json

PREDICTIONS = "predictions.json"


@dataclass(frozen=True)
class Predictions:
    """What one run predicted for each evaluation example, beside the gold reference."""

    task: str
    step: int
    predictions: tuple
    references: tuple


def write_predictions(run_dir: Path, task: str, step: int, predictions: Sequence, references: Sequence) -> Path:
    """Write ``run_dir/predictions.json`` atomically; returns its path."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    return atomic_write_json(Path(run_dir) / PREDICTIONS, {"task": task, "step": step,
                                                           "predictions": _plain(predictions),
                                                           "references": _plain(references)})


def read_predictions(run_dir: Path) -> Optional[Predictions]:
    """The run's predictions, None when it has none; a damaged file is a one-line :class:`DataError`."""
    path = Path(run_dir) / PREDICTIONS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(f"{path}: unreadable ({one_line(error)})") from None
    fields = {"task": str, "step": int, "predictions": list, "references": list}
    if not isinstance(data, dict) or any(not isinstance(data.get(name), kind) for name, kind in fields.items()):
        raise DataError(f"{path}: expected an object with {', '.join(fields)}")
    if len(data["predictions"]) != len(data["references"]):
        raise DataError(f"{path}: {len(data['predictions'])} predictions for {len(data['references'])} references")
    return Predictions(data["task"], data["step"], tuple(map(_frozen, data["predictions"])),
                       tuple(map(_frozen, data["references"])))


def _plain(values: Sequence) -> list:
    """JSON-ready values: numpy scalars to Python numbers, tuples to lists."""
    return [value.item() if hasattr(value, "item") else list(value) if isinstance(value, tuple) else value
            for value in values]


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
