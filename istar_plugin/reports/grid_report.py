"""Everything ``istar-report`` writes for a grid: each paper's tables and figures that the grid's cells allow.

I-STAR's Tables 1 and 2 (:mod:`.istar_tables`, from :mod:`.istar_cells`) and Figure 3 (:mod:`.istar_figure3`), Figures 7 and 8 (:mod:`.zeta_and_layer_figures`),
the Isotropy Layer paper's Table 3 (:mod:`.isolayer_table3`) and Ding et al.'s calibration tables
(:mod:`.calibration_tables`).
"""
from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import Sequence

from ..storage.atomic import atomic_write_text
from . import calibration_tables, isolayer_table3
from .istar_cells import Record
from .istar_figure3 import figure3, figure3_points
from .istar_tables import csv_text, table1, table1_csv_rows, table1_markdown, table2, table2_markdown
from .zeta_and_layer_figures import figure7, figure7_points, figure8, figure8_points

FIGURES = (
    ("figure3.png", figure3_points, figure3, "no I-STAR cell finished"),
    ("figure7.png", figure7_points, figure7, "no all-layer I-STAR cells at 3 or more zetas for one model, task and lambda"),
    ("figure8.png", figure8_points, figure8, "no I-STAR cell penalising a single layer (criterion.layers=[L])"),
)
"""(file name, the points it draws (empty: nothing to draw), the drawing function, why it is not drawn)."""


def unwritten_figures(records: Sequence[Record]) -> list[str]:
    """``NAME not written: WHY`` for each figure the records give nothing to draw."""
    return [f"{name} not written: {why}" for name, points, _, why in FIGURES if not points(records)]


def write_report(records: Sequence[Record], out: Path) -> str:
    """Write every output file into ``out``; returns Table 1 as markdown."""
    out.mkdir(parents=True, exist_ok=True)
    rows1, rows2 = table1(records), table2(records)
    markdown1 = table1_markdown(rows1)
    atomic_write_text(out / "table1.md", markdown1)
    atomic_write_text(out / "table1.csv", csv_text(table1_csv_rows(rows1)))
    atomic_write_text(out / "table2.md", table2_markdown(rows2))
    atomic_write_text(out / "table2.csv", csv_text(rows2, ["model", "task", "method", "lam", "zeta", "variant",
                                                           "mean", "std", "n", "settings_compared"]))
    atomic_write_text(out / "cells.csv", csv_text([asdict(r) for r in records], [f.name for f in fields(Record)]))
    runs = calibration_tables.read_runs(Path(record.path) for record in records)
    if calibration_tables.uses_calibration(runs):
        markdown1 += "\n" + calibration_tables.write_tables(runs, out)
    rows3 = isolayer_table3.rows([Path(record.path) for record in records])
    if rows3:
        markdown3 = isolayer_table3.markdown(rows3)
        atomic_write_text(out / "table3.md", markdown3)
        atomic_write_text(out / "table3.csv", csv_text(rows3, list(isolayer_table3.COLUMNS)))
        markdown1 += "\nIsotropy Layer (Table 3 of its paper): stage 1 beside stage 2\n\n" + markdown3
    for name, points, draw, _ in FIGURES:
        if points(records):
            draw(records, out / name)
    return markdown1
