"""Tables as CSV text, shared by every output ``istar-report`` writes (:mod:`.figures` is the same for figures).

>>> print(csv_text([{"task": "sst2", "mean": 90.40000000000002, "std": None}]), end="")
task,mean,std
sst2,90.4,
"""
from __future__ import annotations

import csv
import io
from typing import Any, Optional, Sequence

__all__ = ["csv_text"]


def csv_text(rows: Sequence[dict[str, Any]], columns: Optional[Sequence[str]] = None) -> str:
    """Rows as CSV text: None as an empty field, floats to 10 decimals (no 90.40000000000002)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns or (rows[0] if rows else [])), lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: _csv_value(value) for key, value in row.items()} for row in rows)
    return buffer.getvalue()


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    return round(value, 10) if isinstance(value, float) else value
