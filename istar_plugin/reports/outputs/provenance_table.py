"""Where a grid's cells ran (``istar-report`` writes it as ``provenance.md``/``.csv``): per cell in the CSV, and in
Markdown one row per host, CPU, bf16 features, torch, precision and code commit, with the cells of each task that
ran so. A grid merged from archives of several machines shows each machine's share; what a run did not record
(:mod:`..records.run_extras`) is shown as not recorded."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Optional, Sequence

from ..records.cells import Record
from ..records.run_extras import Provenance, cell_provenance
from ..tables import markdown_table

__all__ = ["COLUMNS", "CAPTION", "rows", "row", "markdown"]

CELL_COLUMNS = ("path", "model", "task", "method", "lam", "zeta", "variant", "seed")
MACHINE_COLUMNS = tuple(field.name for field in fields(Provenance))
COLUMNS = CELL_COLUMNS + MACHINE_COLUMNS
CAPTION = ("Where the cells ran, as each run recorded it (a run from before these were recorded: the host of its "
           "last attempt and its precision).\n\n")
UNRECORDED = "not recorded"


def rows(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per finished cell (:data:`COLUMNS`), its provenance read from its ``results.json``."""
    return [row(record, cell_provenance(Path(record.path))) for record in records]


def row(record: Record, provenance: Provenance) -> dict[str, Any]:
    """The CSV row of one cell; ``cpu_flags`` space-separated."""
    machine = asdict(provenance)
    if provenance.cpu_flags is not None:
        machine["cpu_flags"] = " ".join(provenance.cpu_flags)
    return {**{name: getattr(record, name) for name in CELL_COLUMNS}, **machine}


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
    return UNRECORDED if value is None else value or empty
