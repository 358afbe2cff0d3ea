"""``export.json``: what a model folder ``istar-export`` wrote was exported from (the run, the run's state then, the
step, the checkpoint, and whether it is a finished result), read back wherever that folder is used as a model."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from ..errors import ModelError
from .reading import read_text

EXPORT_RECORD = "export.json"
KEYS = {"run": str, "run_state": str, "step": int, "checkpoint": str, "finished_result": bool}


def read_export_record(folder: str | os.PathLike) -> Optional[dict[str, Any]]:
    """The ``export.json`` of the model folder ``folder`` (None where it has none); one ModelError line naming the
    file when it cannot be read or lacks one of :data:`KEYS`."""
    path = Path(folder) / EXPORT_RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(read_text(path, "export record", ModelError, max_bytes=1 << 20))
    except ValueError as error:
        raise ModelError(f"{path}: not JSON ({error}); it should say which run the model was exported from") from None
    wrong = [key for key, kind in KEYS.items() if not isinstance(record, dict) or not isinstance(record.get(key), kind)
             or (kind is int and isinstance(record.get(key), bool))]
    if wrong:
        raise ModelError(f"{path}: no valid {', '.join(wrong)}; istar-export writes "
                         f"{', '.join(f'{key} ({kind.__name__})' for key, kind in KEYS.items())}")
    return record
