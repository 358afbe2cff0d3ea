"""istar-tune on a real SLURM cluster (slurm/local_cluster.sh in CI): the workers queued as one job array pulling
trials from one SQLite study, a preempted worker requeued and its trial resumed, then the final comparison queued
with --final and reported."""
import json
import time

import optuna
import pytest
import submitit
from test_search_workers import assert_study_and_directories_agree, progress, write_search
from test_slurm import MISSING, slurm_state, wait_for

from istar_plugin.cli import report as report_cli
from istar_plugin.cli import tune as cli
from istar_plugin.config.searches import trial_dir
from istar_plugin.launch.cell import latest_checkpoint_step
from istar_plugin.launch.tune import SUBMITIT_FOLDER, UNFINISHED, WORKERS

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(MISSING), reason=f"needs a SLURM cluster ({'; '.join(MISSING)}): bash slurm/local_cluster.sh start, "
                          "then source /tmp/istar-plugin-slurm/env.sh")]
# a job's end states in the controller (scontrol show job); a requeued task is REQUEUED, PENDING, RUNNING again
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def test_a_search_runs_as_a_slurm_job_array_survives_a_preemption_and_its_final_comparison_is_queued(
        tiny_bert, shared_data, tmp_path, capsys):
    path = write_search(tmp_path, tiny_bert, shared_data, "optim.epochs=30", "save_every=1", trials=3, pruner="none",
                        final_seeds=[1])
    search_dir = tmp_path / "search"
    started = time.monotonic()
    assert cli.main([str(path), f"search_dir={search_dir}", "slurm=local", "workers=2"]) == 0
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

    assert cli.main([str(path), f"search_dir={search_dir}", "slurm=local", "--final"]) == 0
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
