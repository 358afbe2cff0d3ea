"""Everything ``istar-report`` writes for a grid: each paper's tables and figures that the grid's cells allow.

I-STAR's Tables 1 and 2 and Figure 3 (:mod:`.istar_tables`), Figures 7 and 8 (:mod:`.zeta_and_layer_figures`),
the Isotropy Layer paper's Table 3 (:mod:`.isolayer_table3`) and Ding et al.'s calibration tables
(:mod:`.calibration_tables`).
"""
from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import Sequence

from ..storage.atomic import atomic_write_text
from . import calibration_tables, isolayer_table3
from .istar_tables import (
    Record,
    csv_text,
    figure3,
    figure3_points,
    table1,
    table1_csv_rows,
    table1_markdown,
    table2,
    table2_markdown,
)
from .zeta_and_layer_figures import figure7, figure7_points, figure8, figure8_points


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
    if figure3_points(records):
        figure3(records, out / "figure3.png")
    runs = calibration_tables.read_runs(Path(record.path) for record in records)
    if calibration_tables.uses_calibration(runs):
        markdown1 += "\n" + calibration_tables.write_tables(runs, out)
    rows3 = isolayer_table3.rows([Path(record.path) for record in records])
    if rows3:
        markdown3 = isolayer_table3.markdown(rows3)
        atomic_write_text(out / "table3.md", markdown3)
        atomic_write_text(out / "table3.csv", csv_text(rows3, list(isolayer_table3.COLUMNS)))
        markdown1 += "\nIsotropy Layer (Table 3 of its paper): stage 1 beside stage 2\n\n" + markdown3

    if figure7_points(records):
        figure7(records, out / "figure7.png")
    if figure8_points(records):
        figure8(records, out / "figure8.png")
    return markdown1
