"""``istar-tune``'s stages: workers pulling trials (inline, local processes, a SLURM job array), then the final
comparison of the chosen setting with the baseline as an ordinary grid in ``SEARCH_DIR/final``."""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Callable

import optuna
import submitit

from ..config.searches import FINAL, VALUES, SearchError, SearchSpec, baseline_arguments, trial_arguments
from ..storage.atomic import atomic_write_json
from ..storage.lock import waiting_lock
from .grid import Cell, Grid
from .options import LaunchOptions
from .submit import SUBMITIT_FOLDER, now, run_local, sbatch_script, slurm_executor
from .study import CLAIM_LOCK
from .trial import SearchWorker

WORKERS = "workers.json"
UNFINISHED = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)


def worker_count(spec: SearchSpec, options: LaunchOptions, workers: int | None) -> int:
    """``workers=``, else the launcher's parallelism (1 inline), never more than the budget."""
    default = {"local": options.local.parallelism, "inline": 1,
               "slurm": options.slurm.array_parallelism if options.slurm else 1}[options.launcher]
    return max(1, min(workers or default, spec.trials))


def run_workers(search_dir: Path, options: LaunchOptions, count: int, say: Callable[[str], None]) -> dict[str, int]:
    """Run ``count`` workers (numbered by :func:`reserve_workers`) and return their outcomes, or queue them on SLURM."""
    folder = search_dir / SUBMITIT_FOLDER
    numbers = reserve_workers(search_dir, options.launcher, count)
    if options.launcher == "inline":
        return SearchWorker()(str(search_dir), numbers[0])
    os.environ["PYTHONSAFEPATH"] = "1"  # the jobs import the package this process runs (inherited by them)
    if options.launcher == "slurm":
        executor = slurm_executor(folder, options.slurm, job_name(search_dir))
        jobs = executor.map_array(SearchWorker(), [str(search_dir)] * count, numbers)
        _record_jobs(search_dir, numbers, [job.job_id for job in jobs])
        say(f"queued {count} workers as SLURM job {jobs[0].job_id.split('_')[0]}; progress: "
            f"{search_dir / 'progress.log'}")
        return {}
    outcomes: Counter = Counter()

    def ended(name: str, job: submitit.Job) -> None:
        if (error := job.exception()) is not None:
            first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
            say(f"worker {name} ended before the budget was spent ({first}); a trial it held is resumed by the "
                f"next worker to start (log {job.paths.stderr})")
        else:
            outcomes.update(job.result())

    started: list[str] = []

    def start(name: str, job: submitit.Job) -> None:
        started.append(job.job_id)
        if len(started) == count:
            _record_jobs(search_dir, numbers, started)
            say(f"started {count} local workers (logs in {folder})")

    run_local(folder, options.local, SearchWorker(), [(str(i), (str(search_dir), i)) for i in numbers],
              start, ended, parallelism=count, stoppable=True, tasks_per_node=1)
    return dict(outcomes)


def job_name(search_dir: Path) -> str:
    return f"istar-tune-{search_dir.name}"[:64]


def reserve_workers(search_dir: Path, launcher: str, count: int) -> list[int]:
    """The next ``count`` worker numbers of the search, recorded in ``workers.json`` with their launcher."""
    with waiting_lock(search_dir / CLAIM_LOCK):
        path = search_dir / WORKERS
        starts = json.loads(path.read_text()) if path.is_file() else []
        first = max((n + 1 for start in starts for n in start.get("workers", [])), default=0)
        numbers = list(range(first, first + count))
        starts.append({"time": now(), "launcher": launcher, "workers": numbers, "job_ids": []})
        atomic_write_json(path, starts)
    return numbers


def _record_jobs(search_dir: Path, numbers: list[int], job_ids: list[str]) -> None:
    with waiting_lock(search_dir / CLAIM_LOCK):
        path = search_dir / WORKERS
        starts = json.loads(path.read_text())
        next(start for start in starts if start.get("workers") == numbers)["job_ids"] = job_ids
        atomic_write_json(path, starts)


def unfinished(study: optuna.Study, spec: SearchSpec) -> int:
    """Trials of the budget not yet finished, pruned or failed (running, waiting, or not yet asked for)."""
    trials = study.get_trials(deepcopy=False)
    return sum(t.state in UNFINISHED for t in trials) + max(0, spec.trials - len(trials))


def final_grid(spec: SearchSpec, study: optuna.Study) -> Grid:
    """The chosen setting (the best finished trial) and the baseline at ``final_seeds``, as grid cells."""
    if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        counts = Counter(trial.state.name.lower() for trial in study.get_trials(deepcopy=False))
        states = ", ".join(f"{n} {state}" for state, n in counts.items()) or "no trial"
        raise SearchError(f"no trial of search {spec.name} finished ({states}): there is no setting to compare")
    best = study.best_trial
    cells = [Cell(f"setting={setting},seed={seed}", tuple(arguments), (("setting", setting), ("seed", str(seed))))
             for seed in spec.final_seeds
             for setting, arguments in ((f"trial{best.number}", trial_arguments(spec, best.user_attrs[VALUES], seed)),
                                        ("baseline", baseline_arguments(spec, seed)))]
    return Grid(f"{spec.name}-{FINAL}", tuple(cells))


def describe(spec: SearchSpec, search_dir: Path, options: LaunchOptions, count: int) -> str:
    """The dry run: the search, its space and budget, its database and workers, and the workers' sbatch script."""
    lines = [f"search {spec.name}: {spec.trials} trials of seeds {list(spec.seeds)} in {search_dir.resolve()}, "
             f"sampler {spec.sampler}, pruner {spec.pruner}; {count} workers, launcher={options.launcher}",
             f"  study database: {spec.storage_url(search_dir)}",
             f"  every trial: {' '.join(spec.fixed)}"]
    lines += [f"  {dimension.key}: {dimension.describe()}" for dimension in spec.space]
    lines.append(f"  then the best setting and the baseline ({' '.join(spec.baseline)}) at seeds "
                 f"{list(spec.final_seeds)} in {search_dir.resolve() / FINAL}, scored on the evaluation split")
    if options.launcher == "slurm":
        lines.append(f"sbatch script (one job array of {count} workers, profile {options.profile}):")
        lines.append(sbatch_script(options.slurm, search_dir.resolve() / SUBMITIT_FOLDER, job_name(search_dir), count))
    return "\n".join(lines)
