"""``istar-report GRID_DIR``: the papers' tables and figures from a grid of runs (or an archive of one), or the report
of a search.

    istar-report GRID_DIR [GRID_DIR ...] [--out DIR] [--paper-model bert] [--reference KEY=VALUE]
    istar-report GRID_DIR [GRID_DIR ...] --archive DIR
    istar-report SEARCH_DIR [--out DIR | --archive DIR]
    istar-report SEARCH_DIR SEARCH_DIR [...] --out DIR

A cell is a directory under GRID_DIR holding a ``config.yaml`` or a ``cell.yaml``; one without a readable
``results.json`` (queued, running, crashed) is listed as missing or failed, never dropped. The report (default
GRID_DIR/report; several GRID_DIRs are read as one grid) holds Tables 1 and 2 and Figure 3 of Rudman & Eickhoff
(2024), each method's best setting selected on the evaluation split, every setting against Base paired by seed
(versus_base.md) and what its seeds could detect (power.md), with the tables and figures the cells call for
(held-out selection, zeta and layer figures, curves, the Isotropy Layer's and Ding et al.'s tables, provenance.md);
``--reference KEY=VALUE`` compares every other value of a swept key with that one. ``--archive DIR`` copies the
cells' records (no weights) instead, which ``istar-report DIR`` reads as the grid. A SEARCH_DIR (``istar-tune``'s)
gets its search's report or archive; several are compared. docs/grids.md and docs/searching.md list every output.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..errors import ConfigError, run_command
from ..reports.paper.istar import PAPER_MODELS
from ..storage.ownership import REPORT_MARKER, check_writable, mark
from ..storage.user_paths import path_argument
from . import set_environment


def main(argv: Optional[Sequence[str]] = None) -> int:
    set_environment()
    parser = argparse.ArgumentParser(prog="istar-report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grid_dirs", type=path_argument, nargs="+", metavar="GRID_DIR",
                        help="directory holding the grid's run directories, or an archive of them")
    parser.add_argument("--out", type=path_argument,
                        help="where the report goes (default GRID_DIR/report, for one GRID_DIR)")
    parser.add_argument("--archive", type=path_argument, metavar="DIR",
                        help="copy the finished and failed cells' records (of a search: also its study and "
                             "progress log) into DIR instead of writing a report")
    parser.add_argument("--paper-model", choices=sorted(PAPER_MODELS),
                        help="set this model's numbers from the paper's Table 1 beside a model the paper did not run "
                             "(e.g. MiniLM), marked with its name")
    parser.add_argument("--reference", metavar="KEY=VALUE",
                        help="compare every other value of this swept key with this one, paired by seed "
                             "(e.g. precision=fp32)")
    args = parser.parse_args(argv)
    return run_command("istar-report", lambda: report(args))


def report(args: argparse.Namespace) -> int:
    """Report (or archive) the grids or searches named."""
    from ..reports.comparisons.versus_reference import parse_reference
    from ..reports.records import searches

    if args.reference is not None:
        parse_reference(args.reference)
    search_dirs = [directory for directory in args.grid_dirs if searches.is_search(directory)]
    if search_dirs and len(args.grid_dirs) > 1 and (len(search_dirs) < len(args.grid_dirs) or args.archive):
        grid = next((directory for directory in args.grid_dirs if directory not in search_dirs), None)
        raise ConfigError(f"{search_dirs[0]} is a search directory: report or archive it alone (istar-report "
                          f"{search_dirs[0]} [--archive DIR]), or compare it with other searches (istar-report "
                          f"{search_dirs[0]} SEARCH_DIR ... --out DIR)" + (f"; {grid} is no search directory" if grid
                                                                           else ""))
    if len(search_dirs) > 1 and args.out is None:
        raise ConfigError("several SEARCH_DIRs are compared: name the report's folder with --out")
    if search_dirs and args.archive is not None:
        return archive_search_dir(search_dirs[0], args.archive)
    if search_dirs:
        return report_searches(search_dirs, args.out, args.paper_model, args.reference)
    if args.archive is not None:
        return archive_grids(args.grid_dirs, args.archive)
    if args.out is None and len(args.grid_dirs) > 1:
        raise ConfigError("several GRID_DIRs: name the report's folder with --out")
    return report_grids(args.grid_dirs, args.out, args.paper_model, args.reference)


def report_grids(grid_dirs: Sequence[Path], out: Optional[Path], paper_model: Optional[str],
                 reference: Optional[str]) -> int:
    """``istar-report GRID_DIR ...``: the grids' report into ``out``, the missing or failed cells listed."""
    from ..reports.grid_report import Grid, write_grid
    from ..reports.records.cells import collect_files, recomputed_lines, wall_time_lines

    records, problems, files = collect_files(*grid_dirs)
    if not records and not problems:
        raise ConfigError(f"no cells under {' '.join(map(str, grid_dirs))} (a cell is a directory with a "
                          "config.yaml)")
    out = out or grid_dirs[0] / "report"
    if records:
        check_writable(out, REPORT_MARKER, "--out")
        mark(out, REPORT_MARKER, grid=" ".join(str(grid.resolve()) for grid in grid_dirs))
        grid = Grid(records, paper_model, reference, files)
        print(write_grid(grid, out), end="")
        for line in grid.unpaired_predictions:
            print(f"istar-report: warning: {line}", file=sys.stderr)
        print(f"\n{len(records)} finished cells; report in {out}")
        print("\n".join(recomputed_lines(records) + wall_time_lines(records, files)))
    else:
        print("no cell has finished: no report written")
    print(f"missing or failed cells: {len(problems)}")
    for path, reason in problems:
        print(f"  {path}: {reason}")
    return 0


def report_searches(search_dirs: Sequence[Path], out: Optional[Path], paper_model: Optional[str] = None,
                    reference: Optional[str] = None) -> int:
    """``istar-report SEARCH_DIR``: the search's report into ``out``, its summary and disagreements printed; of several
    (``SEARCH_A SEARCH_B ... --out DIR``), their choices side by side."""
    from ..reports import search_report
    from ..reports.records import searches

    read = [searches.read(directory) for directory in search_dirs]
    comparison = search_report.compare_searches(read) if len(read) > 1 else None
    out = out or search_dirs[0] / "report"
    check_writable(out, REPORT_MARKER, "--out")
    if comparison is not None:
        mark(out, REPORT_MARKER, searches=" ".join(str(directory.resolve()) for directory in search_dirs))
        search_report.write_comparison(comparison, out)
        print("\n".join(search_report.comparison_summary(comparison)))
    else:
        report = search_report.Report(read[0], paper_model, reference)
        mark(out, REPORT_MARKER, search=str(search_dirs[0].resolve()))
        unwritten = search_report.write_report(report, out)
        print("\n".join(search_report.summary(report) + unwritten))
        for row in report.disagreements:
            print(f"istar-report: warning: {searches.problem_line(row)}", file=sys.stderr)
    print(f"report in {out}")
    return 0


def archive_grids(grid_dirs: Sequence[Path], directory: Path) -> int:
    """``--archive``: each grid's records into ``directory``, a line per cell archived or skipped, then the counts."""
    from ..reports.records.archive import archive
    from ..reports.records.cells import grid_directories

    grid_directories(*grid_dirs)  # each grid exists before any is archived
    for grid in grid_dirs:
        outcomes = archive(grid, directory)
        counts = _print_archived(outcomes)
        print(f"{grid}: {counts['archived']} cells archived, {counts['unchanged']} archived before, "
              f"{counts['skipped']} skipped; archive in {directory}")
    return 0


def archive_search_dir(search_dir: Path, directory: Path) -> int:
    """``SEARCH_DIR --archive DIR``: the search's records into ``directory``, a line per run, then the counts."""
    from ..reports.records.archive import archive_search

    outcomes, trials, not_ended = archive_search(search_dir, directory)
    counts = _print_archived(outcomes)
    running = f" ({not_ended} not ended: their runs are archived once they end)" if not_ended else ""
    print(f"{search_dir}: study.json holds {trials} trials{running}; {counts['archived']} runs archived, "
          f"{counts['unchanged']} archived before, {counts['skipped']} skipped; archive in {directory}")
    return 0


def _print_archived(outcomes: Sequence) -> dict[str, int]:
    """A line per record archived or skipped; the count of each state."""
    for outcome in outcomes:
        if outcome.state != "unchanged":
            print(f"{outcome.state} {outcome.name}: {outcome.detail}")
    return {state: sum(o.state == state for o in outcomes) for state in ("archived", "unchanged", "skipped")}


if __name__ == "__main__":
    sys.exit(main())
