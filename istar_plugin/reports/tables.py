"""Tables as ``istar-report`` writes them: one :class:`Table` declaration per output, written by :func:`write_table`."""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from ..storage.atomic import atomic_write_text

SETTING_HEADER = ("Model", "Task", "Method", "λ", "ζ", "other")


@dataclass(frozen=True)
class Table:
    """One output table: ``rows`` of the report's inputs, written as ``NAME.md`` (``caption`` and ``markdown``) and
    ``NAME.csv`` (``csv_rows`` in ``columns``); without rows nothing is written, unless ``always``."""

    name: str
    rows: Callable[[Any], Sequence]
    markdown: Optional[Callable[[Any, Sequence], str]] = None
    columns: Optional[Sequence[str]] = None
    csv_rows: Optional[Callable[[Any, Sequence], Sequence]] = lambda grid, rows: rows
    caption: Union[str, Callable[[Any], str]] = ""
    shown: Optional[str] = None
    always: bool = False
    absent: Optional[Callable[[Any], Optional[str]]] = None


def write_table(table: Table, grid: Any, out: Path) -> Optional[str]:
    """Write ``table`` for ``grid`` into ``out``; returns what to print (:attr:`Table.shown`), else None."""
    rows = table.rows(grid)
    if not rows and not table.always:
        return table.absent(grid) if table.absent else None
    text = None
    if table.markdown is not None:
        caption = table.caption(grid) if callable(table.caption) else table.caption
        text = caption + table.markdown(grid, rows)
        atomic_write_text(out / f"{table.name}.md", text)
    if table.csv_rows is not None:
        atomic_write_text(out / f"{table.name}.csv", csv_text(table.csv_rows(grid, rows), table.columns))
    return None if table.shown is None or text is None else table.shown + text


def csv_text(rows: Sequence[dict[str, Any]], columns: Optional[Sequence[str]] = None, line_end: str = "\n") -> str:
    """Rows as CSV text in ``columns`` (others left out): None as an empty field, floats to 10 decimals."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns or (rows[0] if rows else [])), lineterminator=line_end,
                            extrasaction="ignore")
    writer.writeheader()
    writer.writerows({key: round(value, 10) if isinstance(value, float) else value for key, value in row.items()}
                     for row in rows)  # None: an empty field
    return buffer.getvalue()


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], escape: bool = False) -> str:
    """A Markdown table: the header, its separator and a line per row (``|`` in a cell escaped when ``escape``)."""
    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") if escape else str(c) for c in cells) + " |"
    return "\n".join([line(header), "|---" * len(header) + "|", *map(line, rows)]) + "\n"


def number_text(value: Optional[float]) -> str:
    """A table's number: ``—`` for None, else its shortest form (``-3``, ``0.2``)."""
    return "—" if value is None else f"{value:g}"


def setting_cells(row: dict[str, Any]) -> list[Any]:
    """A row's setting (:func:`~.records.settings.setting_row`) as Markdown cells under :data:`SETTING_HEADER`."""
    return [row["model"], row["task"], row["method"], number_text(row["lam"]), number_text(row["zeta"]),
            row["variant"] or "—"]
