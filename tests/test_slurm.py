"""Grids and searches on a real SLURM cluster (slurm/local_cluster.sh in CI). A grid: one job array, a preempted cell
requeued and resumed from its checkpoint, resubmission skipping finished cells, a job array sbatch refuses a clear
error. An istar-tune search: its workers queued as one job array pulling trials from one SQLite study, a preempted
worker requeued and its trial resumed, then the final comparison queued with --final and reported."""
import json
import os
import shutil
import subprocess
import time

import optuna
import pytest
import submitit
from test_launch import (  # test_launch pickles its hooks by value
    PauseOnce,
    results,
    tiny_arguments,
)
from test_search_workers import assert_study_and_directories_agree, progress, write_search

from istar_plugin.cli import report as report_cli
from istar_plugin.cli import run as cli
from istar_plugin.cli import tune as tune_cli
from istar_plugin.config.searches import trial_dir
from istar_plugin.launch import grid as grid_module
from istar_plugin.launch.cell import CellRunner, attempts, latest_checkpoint_step
from istar_plugin.launch.options import parse
from istar_plugin.launch.submit import SUBMITIT_FOLDER, job_name, launch, plan, read_manifest, sbatch_script
from istar_plugin.launch.tune import UNFINISHED, WORKERS

MISSING = [what for what, ok in [("sbatch is not on PATH", shutil.which("sbatch")),
                                 ("SLURM_CONF is not set", os.environ.get("SLURM_CONF"))] if not ok]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(MISSING), reason=f"needs a SLURM cluster ({'; '.join(MISSING)}): bash slurm/local_cluster.sh start, "
                          "then source /tmp/istar-plugin-slurm/env.sh")]
# a job's end states in the controller (scontrol show job); a requeued task is REQUEUED, PENDING, RUNNING again
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def wait_for(condition, timeout_s, what, report=lambda: ""):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(1)
    raise TimeoutError(f"gave up after {timeout_s} s waiting for {what}{report()}")


def accounting_report(array_id):
    """sacct's records of the array (every attempt) and the controller log's lines about slurmdbd."""
    records = subprocess.run(["sacct", "-n", "-P", "-D", "-j", array_id, "-o", "JobID,State,End"],
                             capture_output=True, text=True, timeout=30).stdout.split()
    log = os.path.join(os.path.dirname(os.path.dirname(os.environ["SLURM_CONF"])), "log", "slurmctld.log")
    dbd = []
    if os.path.exists(log):  # slurm/local_cluster.sh's layout
        with open(log, errors="replace") as handle:
            dbd = [line.rstrip() for line in handle if "dbd" in line.lower() or "accounting" in line.lower()][-15:]
    return f"; sacct -D: {records}; slurmctld.log about slurmdbd: {dbd}"


def accounted_states(array_id):
    """``JOBID|NAME|STATE`` of each task of the array, from the accounting database (what submitit reads)."""
    listing = subprocess.run(["sacct", "-n", "-P", "-X", "-j", array_id, "-o", "JobID,JobName,State"],
                             capture_output=True, text=True, timeout=30)
    return sorted(listing.stdout.split())


def slurm_state(job_id):
    line = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30).stdout
    return dict(token.split("=", 1) for token in line.split() if "=" in token).get("JobState")


@pytest.fixture(scope="module")
def slurm_grid(tiny_bert, shared_data, tmp_path_factory):
    """Two cells identical but for their logging interval, queued as one array with the `local` profile
    (20 min limit: a signal then counts as a preemption); the first pauses after step 3 and is preempted."""
    arguments = [*tiny_arguments(tiny_bert, shared_data), "log_every=1,2"]
    grid = grid_module.sweep(arguments)
    grid_dir = tmp_path_factory.mktemp("slurm_grid")
    options, _ = parse(["slurm=local"])
    launched = launch(grid, grid_dir, plan(grid, grid_dir), options, runner=CellRunner([PauseOnce("log_every=1")]))
    states_at_return = {name: slurm_state(job_id) for name, job_id in launched.jobs.items()}
    folder = grid_dir / SUBMITIT_FOLDER
    jobs = {name: submitit.SlurmJob(folder=folder, job_id=job_id) for name, job_id in launched.jobs.items()}
    try:
        wait_for(lambda: (grid_dir / "log_every=1" / "paused").exists(), 300, "the first cell to reach step 3")
        jobs["log_every=1"]._interrupt()  # SIGTERM then USR2, as a preemption delivers them
        for job in jobs.values():
            wait_for(lambda job=job: job.done(force_check=True), 400, f"job {job.job_id} to end")
        array = next(iter(jobs.values())).job_id.split("_")[0]
        # slurmctld forwards job records to slurmdbd asynchronously: usually within a second or two, once (a
        # CI run) not within 60 s; the message then shows what accounting and the controller's log held
        wait_for(lambda: all(line.endswith("|COMPLETED") for line in accounted_states(array)), 180,
                 f"sacct to record array {array} as completed", lambda: accounting_report(array))
    finally:
        for job in jobs.values():
            if not job.done(force_check=True):
                job.cancel(check=False)
    outputs = {name: job.result() for name, job in jobs.items()}
    return dict(grid=grid, grid_dir=grid_dir, options=options, launched=launched, arguments=arguments,
                states_at_return=states_at_return, outputs=outputs)


def test_grid_is_queued_as_one_job_array_and_submission_returns_at_once(slurm_grid):
    launched, grid_dir = slurm_grid["launched"], slurm_grid["grid_dir"]
    array = read_manifest(grid_dir)["submissions"][0]["array_job_ids"]
    assert len(array) == 1
    assert launched.jobs == {"log_every=1": f"{array[0]}_0", "log_every=2": f"{array[0]}_1"}
    assert launched.statuses == {"log_every=1": "submitted", "log_every=2": "submitted"}
    assert set(slurm_grid["states_at_return"].values()) <= {"PENDING", "RUNNING", "CONFIGURING"}
    assert accounted_states(array[0]) == [f"{array[0]}_{i}|istar-{slurm_grid['grid'].name[:58]}|COMPLETED"
                                          for i in (0, 1)]
    submitted = (grid_dir / SUBMITIT_FOLDER / f"{array[0]}_submission.sh").read_text()
    assert submitted == sbatch_script(slurm_grid["options"].slurm, grid_dir / SUBMITIT_FOLDER,
                                      job_name(slurm_grid["grid"]), 2)  # what --dry-run prints is what was sent
    assert "#SBATCH --array=0-1%2" in submitted and "#SBATCH --time=20" in submitted


def test_preempted_cell_is_requeued_and_resumes_to_the_same_result(slurm_grid):
    grid_dir, outputs = slurm_grid["grid_dir"], slurm_grid["outputs"]
    starts = [a for a in attempts(grid_dir / "log_every=1") if a["event"] == "start"]
    assert len(starts) == 2 and starts[0]["resume_step"] == 0 and starts[1]["resume_step"] >= 1
    assert starts[0]["job_id"] == starts[1]["job_id"] == slurm_grid["launched"].jobs["log_every=1"]
    assert starts[0]["executor"] == "slurm" and starts[1]["slurm_restart_count"] == "1"
    assert [a["event"] for a in attempts(grid_dir / "log_every=2")] == ["start", "finished"]
    assert outputs["log_every=1"]["metrics"] == outputs["log_every=2"]["metrics"]
    assert results(grid_dir / "log_every=1")["history"] == results(grid_dir / "log_every=2")["history"]
    assert outputs["log_every=1"]["step"] == 6


def test_resubmitting_a_finished_slurm_grid_from_the_command_line_queues_nothing(slurm_grid, capsys):
    grid_dir = slurm_grid["grid_dir"]
    assert cli.main(["-m", *slurm_grid["arguments"], "slurm=local", f"grid_dir={grid_dir}"]) == 0
    assert "nothing to queue; skipped 2 finished or active" in capsys.readouterr().out
    manifest = read_manifest(grid_dir)
    assert manifest["submissions"][-1]["array_job_ids"] == [] and len(manifest["submissions"]) == 2
    assert all(len(entry["jobs"]) == 1 and entry["status"] == "finished" for entry in manifest["cells"].values())


def test_a_job_array_refused_by_sbatch_is_a_clear_error(tmp_path, capsys):
    command = ["-m", "recipe=sst2", "seed=1,2", "slurm=local", "slurm.partition=nope", f"grid_dir={tmp_path}"]
    assert cli.main(command) == 2
    assert ("istar-run: error: sbatch refused the job array (profile local): sbatch: error: invalid partition "
            "specified: nope") in capsys.readouterr().err
    assert read_manifest(tmp_path)["submissions"][-1]["submitted"] == []


def test_a_search_runs_as_a_slurm_job_array_survives_a_preemption_and_its_final_comparison_is_queued(
        tiny_bert, shared_data, tmp_path, capsys):
    path = write_search(tmp_path, tiny_bert, shared_data, "optim.epochs=30", "save_every=1", trials=3, pruner="none",
                        final_seeds=[1])
    search_dir = tmp_path / "search"
    started = time.monotonic()
    assert tune_cli.main([str(path), f"search_dir={search_dir}", "slurm=local", "workers=2"]) == 0
    assert time.monotonic() - started < 60  # queued, not run
    out = capsys.readouterr().out
    (entry,) = json.loads((search_dir / WORKERS).read_text())
    array = entry["job_ids"][0].split("_")[0]
    assert entry["launcher"] == "slurm" and entry["job_ids"] == [f"{array}_0", f"{array}_1"]
    assert f"queued 2 workers as SLURM job {array}" in out and "--final" in out
    folder = search_dir / SUBMITIT_FOLDER
    jobs = [submitit.SlurmJob(folder=folder, job_id=job_id) for job_id in entry["job_ids"]]
    try:
        run_dir = trial_dir(search_dir, 0) / "seed=1"
        wait_for(lambda: run_dir.is_dir() and latest_checkpoint_step(run_dir) >= 2, 300,
                 "trial 0 to save a checkpoint")
        holder = next(job for job in jobs if f"worker {job.job_id.split('_')[1]}: trial 0 started"
                      in "\n".join(progress(search_dir)))
        holder._interrupt()  # SIGTERM then USR2, as a preemption delivers them: requeued, the trial resumed
        # the controller's state, not submitit's done(): that reads a result file, which a requeued task's first
        # attempt may have left, and accounting, which may lag; the second attempt runs a trial until it ends
        for job in jobs:
            wait_for(lambda job=job: slurm_state(job.job_id) in ENDED, 600, f"worker {job.job_id} to end",
                     lambda: f"; progress.log ends {progress(search_dir)[-3:]}")
    finally:
        for job in jobs:
            if slurm_state(job.job_id) not in ENDED:
                job.cancel(check=False)
    assert [slurm_state(job.job_id) for job in jobs] == ["COMPLETED", "COMPLETED"]
    lines = progress(search_dir)
    trial0 = [line.split(": ", 1)[1] for line in lines if ": trial 0 " in line]
    assert trial0[0].startswith("trial 0 started") and trial0[1].startswith("trial 0 resumed"), lines
    assert trial0[-1].startswith("trial 0 finished")
    study = assert_study_and_directories_agree(search_dir, 3)
    running = [trial.number for trial in study.trials if trial.state in UNFINISHED]
    assert not running, f"trials {running} still running with both workers ended; progress.log: {lines}"

    assert tune_cli.main([str(path), f"search_dir={search_dir}", "slurm=local", "--final"]) == 0
    assert "queued 2 final cells" in capsys.readouterr().out
    final_jobs = [submitit.SlurmJob(folder=search_dir / "final" / "submitit", job_id=job["job_id"])
                  for cell in json.loads((search_dir / "final" / "manifest.json").read_text())["cells"].values()
                  for job in cell["jobs"]]
    for job in final_jobs:
        wait_for(lambda job=job: job.done(force_check=True), 600, f"final cell {job.job_id} to end")
    assert report_cli.main([str(search_dir)]) == 0
    report = capsys.readouterr().out
    assert "search " in report and "3 finished" in report and "final: 2 cells finished, 0 missing or failed" in report
    assert optuna.trial.TrialState.RUNNING not in {t.state for t in optuna.load_study(
        study_name="search", storage=f"sqlite:///{search_dir / 'study.db'}").trials}
