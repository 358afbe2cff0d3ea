"""``istar-grid``: expand a grid file into cells and run them inline, locally or as SLURM job arrays.

    istar-grid paper launcher=slurm slurm=gpu_a100          # queue the paper's search; returns at once
    istar-grid paper recipe=sst2 seed=1,2 slurm=local --dry-run   # only these cells; print, submit nothing
    istar-grid table1 launcher=local local.parallelism=2 data.source=files data.dir=../shared/data/sst2
    istar-grid paper slurm=gpu_a100 --cells 'recipe=rte,model=bert,seed=3,criterion=istar,lam=-5,zeta=0.2'
    istar-grid --list

Arguments: a key the grid sweeps keeps only the cells with the given values; any other ``key=value`` is
an override for every cell (``a,b`` sweeps it). Launch keys: ``launcher=inline|local|slurm``,
``slurm=PROFILE``, ``slurm.FIELD=VALUE``, ``local.FIELD=VALUE``, ``grid_dir=DIR`` (default
``runs/grids/GRID``). Cells already finished are skipped; the rest resume from their latest checkpoint.
``istar-run -m`` sweeps (``istar-run -m recipe=sst2 seed=1,2,3 ...``) take the same launch keys.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ..config import available
from ..errors import run_command
from ..launch import grid as grid_module
from ..launch import options as profiles
from ..storage.user_paths import text_argument
from . import command_parser


def run(grid: grid_module.Grid, options: profiles.LaunchOptions, arguments: Sequence[str], dry_run: bool) -> int:
    """Plan, then print (dry run) or launch; returns 1 when a local or inline cell failed."""
    grid_dir = (options.grid_dir or grid.default_dir()).resolve()
    grid_module.check_values(grid, grid_dir)  # a bad key or value refused before planning (and torch) loads
    from ..launch import hub_check
    from ..launch import submit as launch
    from ..launch.cell import FINISHED_ELSEWHERE, RUNNING_ELSEWHERE
    from ..reports.records.cells import CellProblem, read_cell

    planned = launch.plan(grid, grid_dir, say=lambda line: print(line, file=sys.stderr, flush=True))
    if dry_run:
        print(launch.describe(grid, grid_dir, planned, options))
        return 0
    skipped = sum(p.status in ("finished", "active") for p in planned)
    elsewhere = sum(p.status == "running" for p in planned)
    if options.launcher != "slurm":  # the hub check istar-run makes, once per distinct need
        for item in {tuple(hub_check.needed_from_hub(p.cfg)): p for p in planned if p.status == "pending"}.values():
            hub_check.check(item.cfg)
    launched = launch.launch(grid, grid_dir, planned, options, arguments=arguments)
    manifest = grid_dir / launch.MANIFEST
    if options.launcher == "slurm":
        arrays = launched.manifest["submissions"][-1]["array_job_ids"]
        queued = (f"queued {len(launched.jobs)} cells as SLURM job {' '.join(arrays)} (squeue -j {','.join(arrays)})"
                  if arrays else "nothing to queue")
        print(f"{queued}; skipped {skipped} finished or active, {elsewhere} {RUNNING_ELSEWHERE}; manifest: {manifest}")
        return 0
    statuses = list(launched.statuses.values())
    skipped += statuses.count(FINISHED_ELSEWHERE)
    print(f"{statuses.count('finished')} cells finished, {len(launched.failed)} failed, {skipped} skipped, "
          f"{elsewhere + statuses.count(RUNNING_ELSEWHERE)} {RUNNING_ELSEWHERE}; manifest: {manifest}")
    for name in launched.failed:  # why, in one line: its results.json's reason, else its last checkpoint and log line
        try:
            read_cell(grid_dir / name)
            reason = "finished"
        except CellProblem as problem:
            reason = str(problem)
        status = launched.statuses[name]
        said = reason if reason.startswith(status) else f"{status}: {reason}"  # results.json's reason: said once
        print(f"  {name}: {said}", file=sys.stderr)
    return 1 if launched.failed else 0


def _body(args: argparse.Namespace) -> int:
    options, rest = profiles.parse(args.arguments)
    grid = grid_module.load(args.grid, rest)
    if args.cells:
        grid = grid.select(args.cells)
    return run(grid, options, [args.grid, *args.arguments], args.dry_run)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = command_parser("istar-grid", __doc__)
    parser.add_argument("grid", nargs="?", type=text_argument, help="a grid in recipes/grids/ (name) or a YAML file")
    parser.add_argument("arguments", nargs="*", help="key=value: cell filters, overrides, launch keys")
    parser.add_argument("--cells", action="append", default=[], metavar="PATTERN",
                        help="only cells whose name matches this shell pattern (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="print the cells and the sbatch script; submit nothing")
    parser.add_argument("--list", action="store_true", help="list the grid files and SLURM profiles")
    args = parser.parse_intermixed_args(argv)
    if args.list:
        print("grids: " + ", ".join(available(grid_module.GRIDS_SUBDIR)))
        print("slurm profiles: " + ", ".join(profiles.available_profiles()))
        return 0
    if not args.grid:
        parser.error("a grid is required (istar-grid --list shows them)")
    return run_command("istar-grid", lambda: _body(args))


if __name__ == "__main__":
    sys.exit(main())
