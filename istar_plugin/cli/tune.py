"""``istar-tune``: choose run settings (I-STAR's lambda and zeta, a learning rate ...) with an Optuna search on data
held out of the training set, then compare the chosen setting with the baseline on the evaluation split.

    istar-tune rte_minilm data.dir=../shared/data/rte launcher=local local.parallelism=2
    istar-tune rte_minilm trials=8 max_steps=20 launcher=inline        # a smaller budget, shorter runs
    istar-tune rte_minilm slurm=gpu_a100 workers=16                    # a job array of workers; returns at once
    istar-tune rte_minilm slurm=gpu_a100 --final                       # once its trials ended: the comparison
    istar-tune rte_minilm --dry-run                                     # print the plan; write nothing
    istar-tune --list

SEARCH is a file in ``recipes/searches/`` (name) or a YAML file (:mod:`istar_plugin.config.searches`).
Arguments: a search key (``trials=N``, ``seeds=[1,2]``, ``final_seeds=[1,2,3]``, ``sampler=``, ``pruner=``,
``storage=URL``) or a run override for every trial (``data.dir=...``, ``max_steps=...``). Launch keys:
``launcher=inline|local|slurm``, ``local.FIELD=VALUE``, ``slurm=PROFILE``, ``slurm.FIELD=VALUE``, ``workers=N``
and ``search_dir=DIR`` (default ``runs/searches/SEARCH``). Starting a search again resumes it: finished trials
stay, a killed worker's trial resumes from its checkpoint, a larger ``trials=`` extends the budget.
``istar-report SEARCH_DIR`` reports it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..config import available, compose
from ..config.searches import FINAL, SEARCHES_SUBDIR, SearchError, check, describe_values, load, trial_arguments
from ..errors import run_command
from ..launch import hub_check
from ..launch import options as profiles
from ..storage.user_paths import expand_home, text_argument
from . import set_environment


def run(name: str, arguments: Sequence[str], dry_run: bool, final_only: bool) -> int:
    options, rest = profiles.parse(arguments, keys=("search_dir", "workers"))
    if options.grid_dir is not None:
        raise SearchError("grid_dir= is istar-grid's; istar-tune takes search_dir=DIR")
    spec = load(name, rest)
    check(spec)
    default = Path("runs", "searches", spec.name)
    search_dir = Path(expand_home(options.keys.get("search_dir") or default, "search_dir=")).resolve()
    workers = options.keys.get("workers")
    if workers is not None and (not workers.isdigit() or int(workers) < 1):
        raise SearchError(f"workers must be a positive integer, got {workers!r}")
    from ..launch import submit as launch
    from ..launch.study import open_search
    from ..launch.tune import describe, final_grid, run_workers, unfinished, worker_count
    from ..storage.study_database import database_errors

    count = worker_count(spec, options, int(workers) if workers else None)
    if dry_run:
        print(describe(spec, search_dir, options, count))
        return 0
    launch.check_launcher(options)
    if options.launcher != "slurm":  # the hub check istar-run makes, once
        hub_check.check(compose(trial_arguments(spec, {d.key: d.corners()[0] for d in spec.space}, spec.seeds[0])))
    study = open_search(spec, search_dir)
    with database_errors(spec.storage_url(search_dir)):  # the database failing mid-search: one line, resumable
        if not final_only:
            outcomes = run_workers(search_dir, options, count, say=print)
            if options.launcher == "slurm":
                print(f"when its trials have ended: istar-tune {name} {' '.join(arguments)} --final")
                return 0
            print("trials: " + (", ".join(f"{n} {what}" for what, n in sorted(outcomes.items())) or "none run now"))
        if left := unfinished(study, spec):
            raise SearchError(f"{left} of the {spec.trials} trials have not ended (running elsewhere, or their "
                              f"workers stopped): run istar-tune {name} again to resume them, then --final")
        grid = final_grid(spec, study)
        best = study.best_trial
    print(f"chosen: trial {best.number} ({describe_values(best.user_attrs['values'])}), validation score "
          f"{best.value:.4f}; scoring it and the baseline at seeds {list(spec.final_seeds)} on the evaluation split")
    planned = launch.plan(grid, search_dir / FINAL)
    launched = launch.launch(grid, search_dir / FINAL, planned, options, arguments=[name, *arguments, "--final"])
    if options.launcher == "slurm":
        print(f"queued {len(launched.jobs)} final cells; then: istar-report {search_dir}")
        return 0
    done_before = sum(item.status == "finished" for item in planned)
    print(f"final: {list(launched.statuses.values()).count('finished')} cells finished now, {done_before} before, "
          f"{len(launched.failed)} failed; istar-report {search_dir} compares them")
    return 1 if launched.failed else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    set_environment()  # before torch: the cells it starts (local processes, SLURM jobs) inherit it
    parser = argparse.ArgumentParser(prog="istar-tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("search", nargs="?", type=text_argument, help="a search in recipes/searches/ or a YAML file")
    parser.add_argument("arguments", nargs="*", help="key=value: search keys, run overrides, launch keys")
    parser.add_argument("--dry-run", action="store_true", help="print the search, its workers and sbatch script")
    parser.add_argument("--final", action="store_true",
                        help="only the final comparison (after the trials ran, e.g. as a SLURM job array)")
    parser.add_argument("--list", action="store_true", help="list the search files and SLURM profiles")
    args = parser.parse_intermixed_args(argv)
    if args.list:
        print("searches: " + ", ".join(available(SEARCHES_SUBDIR)))
        print("slurm profiles: " + ", ".join(profiles.available_profiles()))
        return 0
    if not args.search:
        parser.error("a search is required (istar-tune --list shows them)")
    return run_command("istar-tune", lambda: run(args.search, args.arguments, args.dry_run, args.final))


if __name__ == "__main__":
    sys.exit(main())
