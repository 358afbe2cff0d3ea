"""SIGTERM and SIGINT to a real istar-run process: it stops at the next step's end with a checkpoint, one line saying
where, and exit status 128 + the signal; run again, it resumes, and its metrics.jsonl equals an uninterrupted run's."""
import json
import signal
import subprocess
import sys

import pytest
from helpers import tiny_run_arguments

pytestmark = pytest.mark.slow  # five istar-run processes: three run all 32 steps

# 128 examples in batches of 8 for two epochs: 32 steps, 16 an epoch, so a signal sent after step 5 lands mid-run
# with room to spare, and the resumed run crosses an epoch boundary
STEPS = 32


def command(tiny_bert, shared_data, output_dir):
    return [sys.executable, "-m", "istar_plugin.cli", *tiny_run_arguments(
        tiny_bert, shared_data, "data.max_train_samples=128", "optim.grad_accum=1", "optim.epochs=2",
        f"output_dir={output_dir}", "log_every=1", "progress=true", "tensorboard=false", "seed=3")]


def train_records(run):
    records = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    return [(r["step"], round(r["train/loss"], 6)) for r in records if "train/loss" in r]


@pytest.fixture(scope="module")
def uninterrupted(tiny_bert, shared_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("whole") / "run"
    subprocess.run(command(tiny_bert, shared_data, run), check=True, capture_output=True, text=True, timeout=600)
    return train_records(run)


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_at_a_step_and_the_resumed_run_logs_each_step_once(tiny_bert, shared_data, tmp_path,
                                                                         uninterrupted, number):
    run = tmp_path / "run"
    # a shell's background job (nohup ... &) starts with SIGINT ignored, and the run rightly leaves an ignored
    # signal ignored: the child starts with the default, as from a terminal
    process = subprocess.Popen(command(tiny_bert, shared_data, run), stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in process.stderr:  # progress lines, one per step
        if line.startswith("step 5/"):
            process.send_signal(number)
            break
    rest = process.communicate(timeout=300)[1].strip().splitlines()
    name = signal.Signals(number).name
    assert process.returncode == 128 + number  # 143 for SIGTERM, 130 for SIGINT
    stopped = [line for line in rest if "stopped by" in line]
    assert len(stopped) == 1 and stopped[0].startswith(f"istar-run: error: stopped by {name} after step ")
    step = int(stopped[0].split("after step ")[1].split()[0])
    assert 5 <= step < STEPS and stopped[0].endswith("run the same command again to resume")
    assert (run / "checkpoints" / f"step_{step:08d}.pt").is_file() and not (run / "results.json").exists()
    assert [s for s, _ in train_records(run)] == list(range(1, step + 1))
    resumed = subprocess.run(command(tiny_bert, shared_data, run), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming {run} from step {step} of {STEPS}" in resumed.stderr
    assert train_records(run) == uninterrupted  # each step once, with the uninterrupted run's losses
