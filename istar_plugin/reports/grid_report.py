"""Everything ``istar-report`` writes for a grid, one declaration per output: :data:`TABLES` and :data:`FIGURES`."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from functools import cache, cached_property, partial
from pathlib import Path
from typing import Any, Optional, Sequence

from .comparisons import versus_base, versus_reference
from .comparisons.paired import PairedDifference
from .figures import Figure, write_figures
from .outputs import (calibration_tables, embedding_table, eval_curves, isolayer_table3, istar_tables,
                      penalised_layers, provenance_table)
from .outputs.istar_figures import figure3, figure3_points, figure7, figure7_points, figure8, figure8_points
from .outputs.istar_tables import CAPTIONS, table1, table1_csv_rows, table1_markdown
from ..storage.predictions import Predictions, read_predictions
from .records.cells import CellFiles, Record
from .records.run_extras import ResultsReader, recorded_results, wall_seconds
from .records.settings import Setting, has_validation
from .tables import Table, write_table


@dataclass
class Grid:
    """The grid's records and ``istar-report``'s options; what several outputs share is computed once."""

    records: Sequence[Record]
    paper_model: Optional[str] = None
    reference: Optional[str] = None
    files: dict[str, CellFiles] = field(default_factory=dict, repr=False)  # what collect_files read of each cell
    compared: dict[tuple, Optional[PairedDifference]] = field(default_factory=dict, init=False, repr=False)

    @cached_property
    def results(self) -> ResultsReader:
        """Each cell's ``results.json`` (as :attr:`files` holds it), read once for every output."""
        return cache(lambda cell: self.files[str(cell)].results if str(cell) in self.files else recorded_results(cell))

    def predictions(self, cell: Path) -> Optional[Predictions]:
        """The cell's ``predictions.json`` as :attr:`files` holds it, else read."""
        return self.files[str(cell)].predictions if str(cell) in self.files else read_predictions(cell)

    @cached_property
    def seconds(self) -> isolayer_table3.Seconds:
        """A cell's wall time: its record's (read when it was collected), else :func:`.run_extras.wall_seconds`."""
        known = {Path(record.path): record.seconds for record in self.records}
        return lambda cell: known[Path(cell)] if Path(cell) in known else wall_seconds(cell)

    @cached_property
    def outcome(self) -> versus_base.Reader:
        """Each run's :func:`.comparisons.versus_base.read_outcome`, its files read once for every comparison."""
        return cache(partial(versus_base.read_outcome, read=self.results, predictions=self.predictions))

    def compare(self, setting: Setting, base: Setting, metric: str) -> Optional[PairedDifference]:
        """:func:`.comparisons.versus_base.compare` on the grid's outcomes, each computed once (:attr:`compared`)."""
        key = (setting, base, metric, *(tuple(run.path for run in side.records) for side in (setting, base)))
        if key not in self.compared:
            self.compared[key] = versus_base.compare(setting, base, metric, self.outcome)
        return self.compared[key]

    @cached_property
    def versus_base(self) -> list[dict[str, Any]]:
        return versus_base.comparisons(self.records, self.compare)

    @cached_property
    def unpaired_predictions(self) -> list[str]:
        """What :func:`.comparisons.versus_base.unpaired_predictions` says of the grid's runs."""
        return versus_base.unpaired_predictions(self.records, self.outcome)

    @cached_property
    def calibration(self) -> list[dict[str, Any]]:
        """Ding et al.'s rows (:mod:`.outputs.calibration_tables`), when some cell is a calibration method's."""
        runs = calibration_tables.read_runs((Path(record.path) for record in self.records), self.results)
        calibrating = any(run.method in ("CosReg", "Spec-Pol", "Spec-Exp", "Flow") for run in runs)
        return calibration_tables.calibration_rows(runs) if calibrating else []


def _table1(name: str, selection: str) -> Table:
    """Table 1 selected as ``selection``; none held out unless some setting scored a validation split."""
    return Table(name, caption=CAPTIONS[selection], shown="",
                 rows=lambda grid: table1(grid.records, selection, grid.compare)
                 if selection == "eval" or has_validation(grid.records) else [],
                 markdown=lambda grid, rows: table1_markdown(rows, partial(versus_base.comparison_of, grid.versus_base),
                                                             grid.paper_model),
                 csv_rows=lambda grid, rows: table1_csv_rows(rows, grid.paper_model), always=selection == "eval")


TABLES = (
    _table1("table1", "eval"),
    _table1("table1_heldout", "validation"),
    Table("versus_base", rows=lambda grid: grid.versus_base, caption=versus_base.CAPTION, shown="",
          markdown=lambda grid, rows: versus_base.markdown(rows), columns=versus_base.COLUMNS),
    Table("power", rows=lambda grid: versus_base.power_rows(grid.versus_base), caption=versus_base.POWER_CAPTION,
          shown="", markdown=lambda grid, rows: versus_base.power_markdown(rows), columns=versus_base.POWER_COLUMNS),
    Table("versus_reference", shown="", columns=versus_reference.COLUMNS,
          rows=lambda grid: versus_reference.comparisons(grid.records, grid.reference, grid.compare)
          if grid.reference else [],
          caption=lambda grid: versus_reference.caption(grid.reference),
          markdown=lambda grid, rows: versus_reference.markdown(rows),
          absent=lambda grid: None if grid.reference is None else versus_reference.why_not(grid.reference)),
    Table("penalised_layers", rows=lambda grid: penalised_layers.rows(grid.records, grid.results), shown="",
          caption=penalised_layers.CAPTION + "\n\n", markdown=lambda grid, rows: penalised_layers.markdown(rows),
          columns=penalised_layers.COLUMNS),
    Table("curves", rows=lambda grid: eval_curves.rows(grid.records), caption=eval_curves.CAPTION,
          markdown=lambda grid, rows: eval_curves.markdown(rows), columns=eval_curves.COLUMNS),
    Table("wall_times", rows=lambda grid: provenance_table.wall_times(grid.records),
          caption=provenance_table.WALL_TIMES_CAPTION, columns=provenance_table.WALL_TIMES_COLUMNS,
          markdown=lambda grid, rows: provenance_table.wall_times_markdown(rows)),
    Table("provenance", rows=lambda grid: provenance_table.rows(grid.records, grid.results),
          caption=provenance_table.CAPTION, shown="", markdown=lambda grid, rows: provenance_table.markdown(rows),
          columns=provenance_table.COLUMNS),
    Table("table2", rows=lambda grid: istar_tables.table2(grid.records), always=True,
          markdown=lambda grid, rows: istar_tables.table2_markdown(rows), columns=istar_tables.TABLE2_COLUMNS),
    Table("cells", rows=lambda grid: [asdict(record) for record in grid.records], always=True,
          columns=tuple(field.name for field in fields(Record))),
    Table("calibration_table1", rows=lambda grid: grid.calibration, caption=calibration_tables.TABLE1_CAPTION, shown="",
          markdown=lambda grid, rows: calibration_tables.table1_markdown(rows), csv_rows=None),
    Table("calibration_table4", rows=lambda grid: grid.calibration, caption=calibration_tables.TABLE4_CAPTION, shown="",
          markdown=lambda grid, rows: calibration_tables.table4_markdown(rows), csv_rows=None),
    Table("sentence_embeddings", rows=lambda grid: embedding_table.grid_rows(grid.records, grid.results), shown="",
          caption=embedding_table.GRID_CAPTION + "\n\n", columns=embedding_table.GRID_COLUMNS,
          markdown=lambda grid, rows: embedding_table.grid_markdown(rows)),
    Table("table3", rows=lambda grid: isolayer_table3.rows([Path(record.path) for record in grid.records],
                                                             grid.results, grid.seconds),
          markdown=lambda grid, rows: isolayer_table3.markdown(rows), columns=isolayer_table3.COLUMNS,
          shown="Isotropy Layer (Table 3 of its paper): stage 1 beside stage 2\n\n"),
)

FIGURES = (
    Figure("figure3.png", lambda grid: figure3_points(grid.records),
           lambda grid, path: figure3(grid.records, path, grid.versus_base), "no I-STAR cell finished"),
    Figure("figure7.png", lambda grid: figure7_points(grid.records), lambda grid, path: figure7(grid.records, path),
           "no all-layer I-STAR cells at 3 or more zetas for one model, task and lambda"),
    Figure("figure8.png", lambda grid: figure8_points(grid.records), lambda grid, path: figure8(grid.records, path),
           "no I-STAR cell penalising a single layer (criterion.layers=[L])"),
)


def write_report(records: Sequence[Record], out: Path, paper_model: Optional[str] = None,
                 reference: Optional[str] = None) -> str:
    """Write every output file into ``out``; returns what to print, ending with each figure not written and why.
    ``paper_model``: whose paper numbers stand beside a model the paper did not run; ``reference``: a swept
    ``key=value`` every other value of it is compared with."""
    return write_grid(Grid(records, paper_model, reference), out)


def write_grid(grid: Grid, out: Path) -> str:
    """:func:`write_report` of ``grid``."""
    shown = write_outputs(TABLES, (), grid, out)
    return "\n".join(shown) + "".join(f"{why}\n" for why in write_figures(FIGURES, grid, out))


def write_outputs(tables: Sequence[Table], figures: Sequence[Figure], inputs: Any, out: Path) -> list[str]:
    """Write each table and figure of ``inputs`` into ``out``; returns what each printed or why it was not written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [write_table(table, inputs, out) for table in tables]
    return [line for line in written if line] + write_figures(figures, inputs, out)
