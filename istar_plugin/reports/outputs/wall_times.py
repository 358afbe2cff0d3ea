"""How long a grid's cells took, start to finish, per model, task, method and variant: what a reader needs to
size the same grid elsewhere (``istar-report`` writes it as ``wall_times.md``/``.csv``)."""
from __future__ import annotations

import statistics
from typing import Any, Sequence

from ..records.cells import Record
from ..records.settings import display_name, method_order
from ..tables import markdown_table

__all__ = ["COLUMNS", "CAPTION", "wall_times", "markdown"]

COLUMNS = ("model", "task", "method", "variant", "cells", "median s", "min s", "max s")
CAPTION = "Cell wall times, start to finish (on the machine and load the cells ran under).\n\n"


def wall_times(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per model, task, method and variant whose cells have a wall time (:data:`COLUMNS`)."""
    groups: dict[tuple, list[float]] = {}
    for record in records:
        if record.seconds is not None:
            groups.setdefault((record.model, record.task, record.method, record.variant), []).append(record.seconds)
    methods = method_order(method for _, _, method, _ in groups)
    order = sorted(groups, key=lambda key: (key[0], key[1], methods.index(key[2]), key[3]))
    return [{"model": model, "task": task, "method": display_name(method), "variant": variant,
             "cells": len(groups[key]), "median s": statistics.median(groups[key]), "min s": min(groups[key]),
             "max s": max(groups[key])}
            for key in order for model, task, method, variant in [key]]


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The wall times as a Markdown table, in minutes."""
    return markdown_table(("Model", "Task", "Method", "other", "cells", "median min", "range min"),
                          ([row["model"], row["task"], row["method"], row["variant"] or "—", row["cells"],
                            f"{row['median s'] / 60:.1f}", f"{row['min s'] / 60:.1f}-{row['max s'] / 60:.1f}"]
                           for row in rows))
