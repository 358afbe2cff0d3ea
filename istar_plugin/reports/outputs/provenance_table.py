"""Where and how long a grid's cells ran: ``provenance.md``/``.csv`` and ``wall_times.md``/``.csv``."""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Optional, Sequence

from ..records.cells import Record
from ..records.settings import display_name, method_rank
from ..records.run_extras import Provenance, ResultsReader, cell_provenance, recorded_results
from ..tables import markdown_table

CELL_COLUMNS = ("path", "model", "task", "method", "lam", "zeta", "variant", "seed")
MACHINE_COLUMNS = tuple(field.name for field in fields(Provenance))
COLUMNS = CELL_COLUMNS + MACHINE_COLUMNS
CAPTION = ("Where the cells ran, as each run recorded it (a run from before these were recorded: the host of its "
           "last attempt and its precision).\n\n")


def rows(records: Sequence[Record], read: ResultsReader = recorded_results) -> list[dict[str, Any]]:
    """One row per finished cell (:data:`COLUMNS`), its provenance read from its ``results.json`` (by ``read``)."""
    return [row(record, cell_provenance(Path(record.path), read)) for record in records]


def row(record: Record, provenance: Provenance) -> dict[str, Any]:
    """The CSV row of one cell; ``cpu_flags`` space-separated."""
    return {**{name: getattr(record, name) for name in CELL_COLUMNS}, **asdict(provenance),
            "cpu_flags": None if provenance.cpu_flags is None else " ".join(provenance.cpu_flags)}


def markdown(cells: Sequence[dict[str, Any]]) -> str:
    """One line per distinct provenance, in order of first appearance: its cells, counted per task."""
    groups: dict[tuple, Counter] = {}
    for cell in cells:
        groups.setdefault(tuple(cell[name] for name in MACHINE_COLUMNS), Counter())[cell["task"]] += 1
    return markdown_table(("Host", "CPU", "bf16 features", "torch", "precision", "commit", "cells"), ([
        _shown(host), _shown(cpu), _shown(flags, "none"), _shown(torch), _shown(precision),
        _shown(commit and _short(commit)),
        f"{sum(tasks.values())} ({', '.join(f'{task} {count}' for task, count in sorted(tasks.items()))})"]
        for (host, cpu, flags, torch, precision, commit), tasks in groups.items()))


def _short(commit: str) -> str:
    """A commit's first 12 hex digits, and ``+modified`` if it says so."""
    sha, plus, modified = commit.partition("+")
    return sha[:12] + plus + modified


def _shown(value: Optional[str], empty: str = "") -> str:
    return "not recorded" if value is None else value or empty


WALL_TIMES_COLUMNS = ("model", "task", "method", "variant", "cells", "median s", "min s", "max s")
WALL_TIMES_CAPTION = "Cell wall times, start to finish (on the machine and load the cells ran under).\n\n"


def wall_times(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per model, task, method and variant whose cells have a wall time (:data:`WALL_TIMES_COLUMNS`)."""
    groups: dict[tuple, list[float]] = {}
    for record in records:
        if record.seconds is not None:
            groups.setdefault((record.model, record.task, record.method, record.variant), []).append(record.seconds)
    return [{"model": model, "task": task, "method": display_name(method), "variant": variant, "cells": len(times),
             "median s": statistics.median(times), "min s": min(times), "max s": max(times)}
            for (model, task, method, variant), times in sorted(groups.items(), key=lambda item: (
                item[0][0], item[0][1], method_rank(item[0][2]), item[0][3]))]


def wall_times_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The wall times as a Markdown table, in minutes."""
    return markdown_table(("Model", "Task", "Method", "other", "cells", "median min", "range min"),
                          ([row["model"], row["task"], row["method"], row["variant"] or "—", row["cells"],
                            f"{row['median s'] / 60:.1f}", f"{row['min s'] / 60:.1f}-{row['max s'] / 60:.1f}"]
                           for row in rows))
