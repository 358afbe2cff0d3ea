"""Submit a grid's cells: plan (skip the finished), snapshot, run inline, locally or as SLURM job arrays, and record
job ids in ``GRID_DIR/manifest.json``.

>>> import tempfile
>>> from istar_plugin.launch.grid import sweep
>>> grid = sweep(["recipe=movie_snippets", "seed=1,2"])
>>> [(p.cell.name, p.status, p.cfg.seed) for p in plan(grid, Path(tempfile.mkdtemp()))]
[('seed=1', 'pending', 1), ('seed=2', 'pending', 2)]
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import datetime
import functools
import json
import multiprocessing
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import submitit
from omegaconf import DictConfig

from .. import errors
from ..errors import Stopped
from ..storage.atomic import atomic_write_json
from ..storage.lock import holder, waiting_lock
from ..storage.logs import last_line
from ..storage.ownership import GRID_MARKER, RUN_MARKER, check_writable, mark
from ..storage.results import recorded_precision
from .cell import (FINISHED_ELSEWHERE, RUNNING_ELSEWHERE, SNAPSHOT, CellRunner, differences, is_finished,
                   latest_checkpoint_step, load_snapshot, outcome, write_snapshot)
from .grid import Cell, Grid, GridError, composed, run_arguments
from .options import LaunchError, LaunchOptions, LocalOptions, SlurmProfile

MANIFEST = "manifest.json"
MANIFEST_LOCK = ".manifest.lock"
SUBMITIT_FOLDER = "submitit"
POLL_S = 1.0
PARALLEL_PLAN_CELLS = 200  # grids at least this big are composed by a pool of processes
MAX_PLAN_WORKERS = 16
PLAN_PROGRESS_S = 10.0  # seconds between progress lines while a big grid is planned
PACKAGE_ERROR = re.compile(rf"^{re.escape(errors.__name__)}[.]\w+: ")  # a traceback's last line names its class


@dataclass
class Planned:
    """A cell with its run directory, resolved config and what this submission does with it."""

    cell: Cell
    run_dir: Path
    cfg: DictConfig
    status: str  # "pending" (to run), "finished", "active" (on SLURM) or "running" (another invocation): skipped
    note: str = ""  # "resumes from step N", "job 12_3 is RUNNING", "running in another invocation (host ...)"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def plan(grid: Grid, grid_dir: Path, say: Callable[[str], None] = lambda line: None) -> list[Planned]:
    """Resolve every cell's config and decide what to do with it; a directory holding another config, or files
    istar_plugin did not write, is an error."""
    grid_dir = grid_dir.resolve()
    check_writable(grid_dir, GRID_MARKER, "grid_dir")
    active = active_slurm_jobs(read_manifest(grid_dir))
    planned, conflicts = [], []
    say(f"planning {len(grid.cells)} cells of grid {grid.name} in {grid_dir}")
    configs = compose_all([run_arguments(c, grid_dir) for c in grid.cells], say)
    for cell, cfg in zip(grid.cells, configs):
        run_dir = grid_dir / cell.name
        if isinstance(cfg, str):
            raise GridError(f"cell {cell.name}: {cfg}")
        check_writable(run_dir, RUN_MARKER, "cell directory")  # a folder of someone else's files is left alone
        if (run_dir / SNAPSHOT).is_file() and (
                changed := differences(load_snapshot(run_dir), cfg, recorded_precision(run_dir))):
            conflicts.append(f"{run_dir} (differs at {', '.join(changed[:5])})")
            continue
        if is_finished(run_dir, cfg):
            planned.append(Planned(cell, run_dir, cfg, "finished"))
        elif cell.name in active:
            planned.append(Planned(cell, run_dir, cfg, "active", active[cell.name]))
        elif (held_by := holder(run_dir)) is not None:
            planned.append(Planned(cell, run_dir, cfg, "running", f"{RUNNING_ELSEWHERE} ({held_by})"))
        else:
            step = latest_checkpoint_step(run_dir)
            planned.append(Planned(cell, run_dir, cfg, "pending", f"resumes from step {step}" if step else ""))
    if conflicts:
        raise GridError(f"{len(conflicts)} cell directories hold a different config than this submission would give "
                        f"them: {'; '.join(conflicts[:5])}. Delete them, or choose another grid_dir=, to run the new "
                        "config")
    return planned


def compose_all(argument_lists: Sequence[list[str]],
                say: Callable[[str], None] = lambda line: None) -> list[DictConfig | str]:
    """``compose`` of each argument list, or its error message; big grids use a pool of processes."""
    workers = min(os.cpu_count() or 1, MAX_PLAN_WORKERS)
    configs, reported = [], time.monotonic()
    with contextlib.ExitStack() as stack:
        if len(argument_lists) < PARALLEL_PLAN_CELLS or workers < 2:
            results = map(composed, argument_lists)
        else:  # spawn: a fresh interpreter (forking one that loaded torch is unsafe)
            pool = stack.enter_context(concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn")))
            results = pool.map(composed, argument_lists, chunksize=32)
        for config in results:
            configs.append(config)
            if time.monotonic() - reported > PLAN_PROGRESS_S:
                say(f"  composed {len(configs)}/{len(argument_lists)} cell configs")
                reported = time.monotonic()
    return configs


def read_manifest(grid_dir: Path) -> dict[str, Any]:
    path = Path(grid_dir) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {"cells": {}, "submissions": []}


def _record(grid: Grid, grid_dir: Path, planned: Sequence[Planned], submission: dict[str, Any],
            statuses: dict[str, str], jobs: dict[str, str]) -> dict[str, Any]:
    """Merge one submission into the manifest and write it (the caller holds the manifest's lock)."""
    manifest = read_manifest(grid_dir)
    manifest.update(grid=grid.name, source=str(grid.source) if grid.source else None, grid_dir=str(grid_dir))
    for item in planned:
        entry = manifest["cells"].setdefault(item.cell.name, {"jobs": []})
        entry.update(run_dir=str(item.run_dir), arguments=list(item.cell.arguments), swept=dict(item.cell.swept))
        status = statuses.get(item.cell.name) or ("finished" if item.status == "finished" else None)
        status = "finished" if status == FINISHED_ELSEWHERE else status
        if status == RUNNING_ELSEWHERE or item.status == "running":  # as it is now; that invocation records its end
            elsewhere = holder(item.run_dir) is not None
            status = RUNNING_ELSEWHERE if elsewhere else "finished" if is_finished(item.run_dir, item.cfg) else None
        if status is not None:
            entry["status"] = status
        if item.cell.name in jobs:
            entry["jobs"].append({"job_id": jobs[item.cell.name], "launcher": submission["launcher"],
                                  "submitted": submission["time"]})
    manifest["submissions"].append(submission)
    atomic_write_json(Path(grid_dir) / MANIFEST, manifest)
    return manifest


def active_slurm_jobs(manifest: dict[str, Any]) -> dict[str, str]:
    """Cells whose last SLURM job is still pending or running (from ``squeue``), with a note naming the job."""
    last = {name: entry["jobs"][-1]["job_id"] for name, entry in manifest["cells"].items()
            if entry.get("jobs") and entry["jobs"][-1]["launcher"] == "slurm"}
    if not last or shutil.which("squeue") is None:
        return {}
    arrays = sorted({job_id.split("_")[0] for job_id in last.values()})
    listing = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(arrays)],
                             capture_output=True, text=True, timeout=60)
    states = dict(line.split() for line in listing.stdout.splitlines() if line.strip())
    return {name: f"job {job_id} is {states[job_id]}" for name, job_id in last.items() if job_id in states}


def job_name(grid: Grid) -> str:
    return f"istar-{grid.name}"[:64]


def sbatch_script(profile: SlurmProfile, folder: Path, name: str, count: int) -> str:
    """The sbatch script of one job array of ``count`` cells, exactly as submitit writes it."""
    from submitit.slurm.slurm import _make_sbatch_string  # submitit's own renderer: the dry run shows what is sent

    command = " ".join([shlex.quote(sys.executable), "-u -m submitit.core._submit", shlex.quote(str(folder))])
    return _make_sbatch_string(command=command, folder=folder, map_count=count if count > 1 else None,
                               **profile.executor_parameters(name))


def describe(grid: Grid, grid_dir: Path, planned: Sequence[Planned], options: LaunchOptions) -> str:
    """The dry run: what would be submitted, each cell with its status and arguments, and the sbatch script."""
    pending = [p for p in planned if p.status == "pending"]
    counts = collections.Counter(p.status for p in planned)
    lines = [f"grid {grid.name}: {len(planned)} cells in {grid_dir.resolve()}; {counts['pending']} to run, "
             f"{counts['finished']} finished, {counts['active']} queued or running, {counts['running']} "
             f"{RUNNING_ELSEWHERE}; launcher={options.launcher}"]
    for item in planned:
        what = "run" if item.status == "pending" else f"skip ({item.status})"
        note = f"  [{item.note}]" if item.note else ""
        lines.append(f"  {what:16} {item.cell.name}  <- {' '.join(item.cell.arguments)}{note}")
    if options.launcher == "slurm" and pending:
        size = options.slurm.max_array_size
        arrays, first = -(-len(pending) // size), min(len(pending), size)
        lines.append(f"sbatch script ({arrays} job array{'s' if arrays > 1 else ''}, the first of {first} cells, "
                     f"profile {options.profile}):")
        lines.append(sbatch_script(options.slurm, grid_dir.resolve() / SUBMITIT_FOLDER, job_name(grid), first))
    return "\n".join(lines)


@dataclass
class Launched:
    """What a submission did: ``statuses`` per submitted cell, ``jobs`` (cell -> job id), the manifest."""

    statuses: dict[str, str]
    jobs: dict[str, str]
    manifest: dict[str, Any]

    @property
    def failed(self) -> list[str]:
        return [name for name, status in self.statuses.items() if status.startswith("failed")]


def launch(grid: Grid, grid_dir: Path, planned: Sequence[Planned], options: LaunchOptions,
           arguments: Sequence[str] = (), runner: Optional[CellRunner] = None,
           log: Callable[[str], None] = functools.partial(print, flush=True)) -> Launched:
    """Snapshot the pending cells' configs, run or queue them, and write the manifest.
    Raises ``LaunchError`` when sbatch refuses an array (after recording the arrays queued before it)."""
    grid_dir = grid_dir.resolve()
    runner = runner or CellRunner()
    pending = [p for p in planned if p.status == "pending"]
    if pending:
        check_launcher(options)
        mark(grid_dir, GRID_MARKER, grid=grid.name)
    for item in pending:
        write_snapshot(item.run_dir, item.cfg)
    submission = {"time": now(), "launcher": options.launcher, "profile": options.profile, "arguments": list(arguments),
                  "array_job_ids": [], "submitted": [p.cell.name for p in pending],
                  "skipped": {p.cell.name: p.note or p.status for p in planned if p.status != "pending"}}
    refused = None
    if options.launcher != "inline":  # the jobs import the package this process runs (inherited by them)
        os.environ["PYTHONSAFEPATH"] = "1"
    if options.launcher == "slurm":
        jobs, refused = _queue_on_slurm(grid, grid_dir, pending, options, runner)
        submission["array_job_ids"] = sorted({job_id.split("_")[0] for job_id in jobs.values()}, key=int)
        submission["submitted"] = list(jobs)
        statuses = {name: "submitted" for name in jobs}
    elif options.launcher == "local":
        statuses, jobs = _run_local(grid_dir, pending, options, runner, log)
    else:
        statuses, jobs = _run_inline(pending, runner, log), {}
    with waiting_lock(grid_dir / MANIFEST_LOCK):
        manifest = _record(grid, grid_dir, planned, submission, statuses, jobs)
    if refused:
        queued = f" ({len(jobs)} cells were queued before: see {grid_dir / MANIFEST})" if jobs else ""
        raise LaunchError(refused + queued)
    return Launched(statuses, jobs, manifest)


def check_launcher(options: LaunchOptions) -> None:
    """Refuse, before anything is written, a launcher that cannot start here (``slurm`` without ``sbatch``)."""
    if options.launcher == "slurm" and shutil.which("sbatch") is None:
        raise LaunchError("launcher=slurm needs SLURM's sbatch, which is not on this machine's PATH: run on a machine "
                          "of the cluster (e.g. its login node), or choose launcher=local or launcher=inline; nothing "
                          "was written")


def slurm_executor(folder: Path, profile: SlurmProfile, name: str) -> submitit.SlurmExecutor:
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=profile.max_requeues)
    executor.update_parameters(**profile.executor_parameters(name))
    return executor


def _queue_on_slurm(grid: Grid, grid_dir: Path, pending: Sequence[Planned], options: LaunchOptions,
                    runner: CellRunner) -> tuple[dict[str, str], Optional[str]]:
    """Queue the cells as arrays of at most ``max_array_size``; returns the job ids and sbatch's error, if any."""
    if not pending:
        return {}, None
    profile = options.slurm
    executor = slurm_executor(grid_dir / SUBMITIT_FOLDER, profile, job_name(grid))
    jobs = {}
    for start in range(0, len(pending), profile.max_array_size):
        chunk = pending[start : start + profile.max_array_size]
        try:
            submitted = executor.map_array(runner, [str(p.run_dir) for p in chunk])
        except submitit.core.utils.FailedJobError as error:
            return jobs, f"sbatch refused the job array (profile {options.profile}): {error}"
        jobs.update({p.cell.name: job.job_id for p, job in zip(chunk, submitted)})
    return jobs, None


def _failure(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return "failed: " + (lines[-1] if lines else type(error).__name__)


def job_failure(job: submitit.Job, error: BaseException) -> str:
    """``failed: `` and the run's own error, the last line of its first failed task's stderr log (a package error's
    message as the command-line tools print it), with that log's path; else the last line of submitit's error."""
    failed = next((job.task(number) for number in range(job.num_tasks) if job.task(number).exception() is not None),
                  job)
    said = last_line(failed.paths.stderr, limit=1000)
    if not said:
        return _failure(error)
    return f"failed: {PACKAGE_ERROR.sub('', said)} (log {failed.paths.stderr})"


def _run_inline(pending: Sequence[Planned], runner: CellRunner, log: Callable[[str], None]) -> dict[str, str]:
    statuses = {}
    for number, item in enumerate(pending, start=1):
        log(f"[{number}/{len(pending)}] running {item.cell.name}")
        started = time.monotonic()
        try:
            statuses[item.cell.name] = outcome(runner(str(item.run_dir)))
        except Exception as error:  # one failed cell does not stop the grid; its status says why
            statuses[item.cell.name] = _failure(error)
        log(f"[{number}/{len(pending)}] {item.cell.name}: {statuses[item.cell.name]} "
            f"({time.monotonic() - started:.0f} s)")
    return statuses


def run_local(folder: Path, local: LocalOptions, runner: Callable, calls: Sequence[tuple[str, tuple]],
              started: Callable[[str, submitit.Job], None], ended: Callable[[str, submitit.Job], None],
              parallelism: Optional[int] = None, stoppable: bool = False, **parameters: Any) -> dict[str, str]:
    """Run each named call of ``runner`` as a local submitit job, ``parallelism`` at a time; returns their job ids.
    ``stoppable``: SIGINT or SIGTERM is passed on to the jobs as SIGTERM, then :class:`Stopped` raised once they end."""
    executor = submitit.LocalExecutor(folder=folder, max_num_timeout=local.max_requeues)
    executor.update_parameters(**{**local.executor_parameters(), **parameters})
    queue, running, jobs, received = list(calls), {}, {}, []

    def stop(job: submitit.Job) -> None:
        with contextlib.suppress(OSError, ValueError):  # the job's id is its controller's process id
            os.kill(int(job.job_id), signal.SIGTERM)

    def handle(number: int, frame: Any) -> None:
        received.append(number)
        for job in running.values():
            stop(job)

    stoppable = stoppable and threading.current_thread() is threading.main_thread()  # where handlers can be set
    numbers = (signal.SIGINT, signal.SIGTERM) if stoppable else ()
    with _signals(handle, *numbers):
        while queue or running:
            while queue and not received and len(running) < (parallelism or local.parallelism):
                name, arguments = queue.pop(0)
                with _signals(signal.SIG_IGN, *numbers[:1]):  # Ctrl-C spares the job: it inherits the ignoring
                    running[name] = executor.submit(runner, *arguments)
                jobs[name] = running[name].job_id
                if received:  # a signal while it started
                    stop(running[name])
                started(name, running[name])
            done = [name for name, job in running.items() if job.done()]
            for name in done:
                ended(name, running.pop(name))
            if not done:
                time.sleep(POLL_S)
    if received:
        name = signal.Signals(received[0]).name
        raise Stopped(f"stopped by {name}: the {len(jobs)} local jobs started ended (each at a step's end, its "
                      "checkpoint kept) and none was left running; run the same command again to resume", received[0])
    return jobs


@contextlib.contextmanager
def _signals(handler: Any, *numbers: int) -> Iterator[None]:
    previous = {number: signal.signal(number, handler) for number in numbers}
    try:
        yield
    finally:
        for number, before in previous.items():
            signal.signal(number, before)


def _run_local(grid_dir: Path, pending: Sequence[Planned], options: LaunchOptions, runner: CellRunner,
               log: Callable[[str], None]) -> tuple[dict[str, str], dict[str, str]]:
    statuses, clock = {}, {}

    def started(name: str, job: submitit.Job) -> None:
        clock[name] = time.monotonic()
        log(f"started {name} (local job {job.job_id}; log {job.paths.stderr})")

    def ended(name: str, job: submitit.Job) -> None:
        error = job.exception()
        statuses[name] = outcome(job.results()[0]) if error is None else job_failure(job, error)  # rank 0's
        log(f"[{len(statuses)}/{len(pending)}] {name}: {statuses[name]} ({time.monotonic() - clock[name]:.0f} s)")

    jobs = run_local(grid_dir / SUBMITIT_FOLDER, options.local, runner,
                     [(p.cell.name, (str(p.run_dir),)) for p in pending], started, ended)
    return statuses, jobs
