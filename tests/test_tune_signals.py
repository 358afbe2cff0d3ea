"""Signals to a local search (launcher=local): Ctrl-C to its process group, or SIGTERM to its own process, ends its
workers each at a step's end (none left training unseen, no traceback), exits 130 or 143 with one line, and the search
resumes its trials when started again."""
import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from test_search_workers import assert_study_and_directories_agree, study_of, write_search

from istar_plugin.config.searches import trial_dir
from istar_plugin.launch.cell import latest_checkpoint_step
from istar_plugin.launch.tune import WORKERS

pytestmark = pytest.mark.slow


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("to_group, number, code", [(True, signal.SIGINT, 130), (False, signal.SIGTERM, 143)])
def test_a_signal_to_a_local_search_ends_its_workers_and_the_search_resumes(
        tiny_bert, shared_data, tmp_path, to_group, number, code):
    path = write_search(tmp_path, tiny_bert, shared_data, "optim.epochs=12", "save_every=1", trials=2, pruner="none",
                        final_seeds=[1])
    search_dir = tmp_path / "search"
    command = [sys.executable, "-m", "istar_plugin.cli.tune", str(path), f"search_dir={search_dir}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    tune = subprocess.Popen([*command, "launcher=local", "local.parallelism=2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    deadline = time.monotonic() + 600
    while not all(latest_checkpoint_step(trial_dir(search_dir, n) / "seed=1") >= 1 for n in (0, 1)):
        assert tune.poll() is None, tune.communicate()
        assert time.monotonic() < deadline, "no checkpoint of both trials within 600 s"
        time.sleep(0.1)
    os.killpg(tune.pid, number) if to_group else os.kill(tune.pid, number)
    out, err = (text.decode() for text in tune.communicate(timeout=600))
    assert tune.returncode == code, err
    lines = err.splitlines()
    assert lines[-1] == (f"istar-tune: error: stopped by {signal.Signals(number).name}: the 2 local jobs started ended "
                         "(each at a step's end, its checkpoint kept) and none was left running; run the same command "
                         "again to resume"), lines
    assert "Traceback" not in out + err
    (start,) = json.loads((search_dir / WORKERS).read_text())
    assert start["workers"] == [0, 1] and not any(alive(int(job)) for job in start["job_ids"])  # controllers ended
    _, study = study_of(search_dir)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.RUNNING] * 2  # resumable
    for n in (0, 1):
        assert not (trial_dir(search_dir, n) / "seed=1" / "results.json").exists()
    again = subprocess.run([*command, "launcher=inline"], capture_output=True, text=True, env=env, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "trial 0 resumed" in again.stdout and "trial 1 resumed" in again.stdout
    assert_study_and_directories_agree(search_dir, 2)
