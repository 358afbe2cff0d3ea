"""Everything ``istar-report`` writes for a grid: each paper's tables and figures that the grid's cells allow.

I-STAR's Tables 1 and 2 (:mod:`.istar_tables`, from :mod:`.istar_cells`) and Figure 3 (:mod:`.istar_figure3`), Figures 7 and 8 (:mod:`.zeta_and_layer_figures`),
the penalised layers' IsoScore* (:mod:`.penalised_layers`),
the Isotropy Layer paper's Table 3 (:mod:`.isolayer_table3`) and Ding et al.'s calibration tables
(:mod:`.calibration_tables`).
"""
from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import Optional, Sequence

from ..storage.atomic import atomic_write_text
from .comparisons import versus_base, versus_reference
from .comparisons.paired import LEVEL
from .outputs import calibration_tables, isolayer_table3, penalised_layers, sentence_embedding_table, wall_times
from .outputs.istar_figure3 import figure3, figure3_points
from .outputs.istar_table1 import table1, table1_csv_rows, table1_markdown
from .outputs.istar_table2 import table2, table2_markdown
from .outputs.zeta_and_layer_figures import figure7, figure7_points, figure8, figure8_points
from .records.cells import Record
from .records.settings import SELECTIONS, has_validation
from .tables import csv_text

FIGURES = (
    ("figure3.png", figure3_points, figure3, "no I-STAR cell finished"),
    ("figure7.png", figure7_points, figure7, "no all-layer I-STAR cells at 3 or more zetas for one model, task and lambda"),
    ("figure8.png", figure8_points, figure8, "no I-STAR cell penalising a single layer (criterion.layers=[L])"),
)
"""(file name, the points it draws (empty: nothing to draw), the drawing function, why it is not drawn)."""


def _write_versus_reference(records: Sequence[Record], reference: str, out: Path) -> str:
    rows = versus_reference.comparisons(records, reference)
    if not rows:
        return f"versus_reference.md not written: no setting has {reference.partition('=')[0]} at another value than {reference}\n"
    caption = (f"Every setting against the same setting with {reference}, paired by seed: mean difference (points), "
               f"{LEVEL:.0%} bootstrap interval, verdict at this sample size; the reference's standard deviation over "
               "seeds, and whether the mean difference lies within it; the same for the eval IsoScore*.\n\n")
    text = caption + versus_reference.markdown(rows)
    atomic_write_text(out / "versus_reference.md", text)
    atomic_write_text(out / "versus_reference.csv", csv_text([{k: row[k] for k in versus_reference.COLUMNS}
                                                              for row in rows], list(versus_reference.COLUMNS)))
    return text


def unwritten_figures(records: Sequence[Record]) -> list[str]:
    """``NAME not written: WHY`` for each figure the records give nothing to draw."""
    return [f"{name} not written: {why}" for name, points, _, why in FIGURES if not points(records)]


def write_report(records: Sequence[Record], out: Path, paper_model: Optional[str] = None,
                 reference: Optional[str] = None) -> str:
    """Write every output file into ``out``; returns what to print: Table 1 (and its held-out selection when the
    cells scored a validation split), every setting against Base (``versus_base.md``) and the other papers' tables.
    ``paper_model`` (``bert``): whose numbers in the paper's Table 1 stand beside a model the paper did not run;
    ``reference`` (``precision=fp32``): every other value of that swept key against it (``versus_reference.md``)."""
    out.mkdir(parents=True, exist_ok=True)
    rows1, rows2, paired = table1(records), table2(records), versus_base.comparisons(records)
    interval = lambda setting: versus_base.comparison_of(paired, setting)  # noqa: E731
    markdown1 = f"Table 1: {SELECTIONS['eval']}.\n\n" + table1_markdown(rows1, interval, paper_model)
    atomic_write_text(out / "table1.md", markdown1)
    atomic_write_text(out / "table1.csv", csv_text(table1_csv_rows(rows1, paper_model)))
    if has_validation(records):
        held_out = table1(records, selection="validation")
        markdown_held_out = (f"Table 1, held out: {SELECTIONS['validation']}.\n\n"
                             + table1_markdown(held_out, interval, paper_model))
        atomic_write_text(out / "table1_heldout.md", markdown_held_out)
        atomic_write_text(out / "table1_heldout.csv", csv_text(table1_csv_rows(held_out, paper_model)))
        markdown1 += "\n" + markdown_held_out
    if paired:
        caption = (f"Every setting against Base, paired by seed: mean difference (points), {LEVEL:.0%} bootstrap interval "
                   "(resampling the seeds, and the evaluation examples where `resampled` says so), verdict at this "
                   "sample size (n.d.: not distinguishable).\n\n")
        atomic_write_text(out / "versus_base.md", caption + versus_base.markdown(paired))
        atomic_write_text(out / "versus_base.csv", csv_text([{k: row[k] for k in versus_base.COLUMNS} for row in paired],
                                                            list(versus_base.COLUMNS)))
        markdown1 += "\n" + caption + versus_base.markdown(paired)
    if reference is not None:
        markdown1 += "\n" + _write_versus_reference(records, reference, out)
    layer_rows = penalised_layers.rows(records)
    if layer_rows:
        layer_table = penalised_layers.CAPTION + "\n\n" + penalised_layers.markdown(layer_rows)
        atomic_write_text(out / "penalised_layers.md", layer_table)
        atomic_write_text(out / "penalised_layers.csv", csv_text(layer_rows, list(penalised_layers.COLUMNS)))
        markdown1 += "\n" + layer_table
    times = wall_times.wall_times(records)
    if times:
        caption = "Cell wall times, start to finish (on the machine and load the cells ran under).\n\n"
        atomic_write_text(out / "wall_times.md", caption + wall_times.markdown(times))
        atomic_write_text(out / "wall_times.csv", csv_text(times, list(wall_times.COLUMNS)))
    atomic_write_text(out / "table2.md", table2_markdown(rows2))
    atomic_write_text(out / "table2.csv", csv_text(rows2, ["model", "task", "method", "lam", "zeta", "variant",
                                                           "mean", "std", "n", "settings_compared"]))
    atomic_write_text(out / "cells.csv", csv_text([asdict(r) for r in records], [f.name for f in fields(Record)]))
    runs = calibration_tables.read_runs(Path(record.path) for record in records)
    if calibration_tables.uses_calibration(runs):
        markdown1 += "\n" + calibration_tables.write_tables(runs, out)
    embedding_rows = sentence_embedding_table.rows(records)
    if embedding_rows:
        markdown_embeddings = sentence_embedding_table.markdown(embedding_rows)
        atomic_write_text(out / "sentence_embeddings.md", sentence_embedding_table.CAPTION + "\n\n" + markdown_embeddings)
        atomic_write_text(out / "sentence_embeddings.csv", csv_text(embedding_rows, list(sentence_embedding_table.COLUMNS)))
        markdown1 += "\n" + sentence_embedding_table.CAPTION + "\n\n" + markdown_embeddings
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
