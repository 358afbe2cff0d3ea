"""SIGTERM and SIGINT stop a run at the next step's end with a checkpoint of that step, one line saying where, and
exit status 128 + the signal; run again, it resumes and logs each step once, with an uninterrupted run's losses.
Delivered to this process during a tiny run, to a real istar-run process, and during the Sigma_S pass (which stops at
once, its statistics computed afresh on resume)."""
import json
import os
import re
import signal
import subprocess
import sys

import pytest
from helpers import tiny_run_arguments

from istar_plugin.config import compose
from istar_plugin.criterions import shrinkage
from istar_plugin.errors import Stopped
from istar_plugin.hooks import Hook
from istar_plugin.training.trainer import Trainer


class SignalAt(Hook):
    """Sends ``number`` to this process once optimizer step ``step`` is done; refuses to when nothing would catch it
    (the default SIGTERM action would end the test process)."""

    def __init__(self, number, step):
        self.number, self.step = number, step

    def on_step_end(self, trainer, step, stats):
        if step == self.step:
            if signal.getsignal(self.number) in (signal.SIG_DFL, signal.SIG_IGN):
                raise RuntimeError(f"no handler for {signal.Signals(self.number).name} while training")
            os.kill(os.getpid(), self.number)


def train_records(run):
    records = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    return [(record["step"], round(record["train/loss"], 6)) for record in records if "train/loss" in record]


@pytest.fixture
def interruptible():
    """Ctrl-C raises KeyboardInterrupt in this process, as in a terminal: pytest started in the background by a shell
    (``pytest &``) inherits SIGINT ignored, and a run leaves an ignored signal ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_run_at_a_step_s_end_and_the_resumed_run_logs_each_step_once(
        tiny_bert, shared_data, tmp_path, number, interruptible):
    arguments = tiny_run_arguments(tiny_bert, shared_data, "optim.grad_accum=1", "optim.epochs=1", "log_every=1",
                                   "tensorboard=false")  # 32 examples in batches of 8: 4 steps
    Trainer(compose([*arguments, f"output_dir={tmp_path / 'whole'}"])).fit()
    run = tmp_path / "run"
    cfg = compose([*arguments, f"output_dir={run}"])
    with pytest.raises(Stopped) as stopped:
        Trainer(cfg, hooks=[SignalAt(number, 2)]).fit()
    assert stopped.value.exit_code == 128 + number  # 143 for SIGTERM, 130 for SIGINT
    found = re.match(rf"stopped by {signal.Signals(number).name} after step (\d) of 4 ", str(stopped.value))
    assert found, str(stopped.value)
    step = int(found.group(1))
    assert 2 <= step < 4 and str(stopped.value).endswith("run the same command again to resume")
    assert (run / "checkpoints" / f"step_{step:08d}.pt").is_file() and not (run / "results.json").exists()
    assert [logged for logged, _ in train_records(run)] == list(range(1, step + 1))
    assert Trainer(cfg).fit()["step"] == 4
    assert train_records(run) == train_records(tmp_path / "whole")


# ----------------------------------------------------------------------------- a real istar-run process
# 128 examples in batches of 8 for two epochs: 32 steps, 16 an epoch, so a signal sent after step 5 lands mid-run
# with room to spare, and the resumed run crosses an epoch boundary
STEPS = 32


def command(tiny_bert, shared_data, output_dir):
    return [sys.executable, "-m", "istar_plugin.cli", *tiny_run_arguments(
        tiny_bert, shared_data, "data.max_train_samples=128", "optim.grad_accum=1", "optim.epochs=2",
        f"output_dir={output_dir}", "log_every=1", "progress=true", "tensorboard=false", "seed=3")]


@pytest.fixture(scope="module")
def uninterrupted(tiny_bert, shared_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("whole") / "run"
    subprocess.run(command(tiny_bert, shared_data, run), check=True, capture_output=True, text=True, timeout=600)
    return train_records(run)


@pytest.mark.slow  # five istar-run processes: three run all 32 steps
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


# ------------------------------------------------------------------------------ during the Sigma_S pass
def test_sigterm_during_the_sigma_s_pass_stops_at_once_and_the_resumed_run_computes_it_afresh(
        tiny_bert, shared_data, tmp_path, monkeypatch):
    arguments = tiny_run_arguments(tiny_bert, shared_data, "optim.grad_accum=1", "optim.epochs=1", "log_every=1",
                                   "tensorboard=false", "criterion=istar", "criterion.shrinkage_points=100000",
                                   "eval_batch_size=4")  # 32 examples: 4 steps; Sigma_S from 8 batches of 4
    Trainer(compose([*arguments, f"output_dir={tmp_path / 'whole'}"])).fit()
    batches, stream = [], shrinkage.stream_token_statistics

    def signalled_after_the_first_batch(*args, progress, **kwargs):
        def counted(points):
            progress(points)
            batches.append(points)
            if len(batches) == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # caught by the trainer's listener, as from SLURM
        return stream(*args, progress=counted, **kwargs)

    monkeypatch.setattr(shrinkage, "stream_token_statistics", signalled_after_the_first_batch)
    run = tmp_path / "run"
    cfg = compose([*arguments, f"output_dir={run}"])
    with pytest.raises(Stopped) as stopped:
        Trainer(cfg).fit()
    assert (str(stopped.value), stopped.value.exit_code) == (
        f"stopped by SIGTERM after step 0 of 4 (epoch 1); checkpoint step_00000000.pt saved in {run}: run the same "
        "command again to resume", 143)
    assert len(batches) == 1  # the pass read no batch after the signal
    assert (run / "checkpoints" / "step_00000000.pt").is_file() and not (run / "results.json").exists()
    monkeypatch.setattr(shrinkage, "stream_token_statistics", stream)
    assert Trainer(cfg).fit()["step"] == 4
    assert sigma_s_and_losses(run) == sigma_s_and_losses(tmp_path / "whole")  # computed afresh, trained alike


def sigma_s_and_losses(run):
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return ([record["sigma_s/points"] for record in records if "sigma_s/points" in record],
            [(record["step"], round(record["train/loss"], 6)) for record in records if "train/loss" in record])


# ------------------------------------------------------------------------------ during the step-0 evaluation
def test_sigterm_during_the_step_0_evaluation_stops_with_its_line_and_the_resumed_run_evaluates_once(
        tiny_bert, shared_data, tmp_path, monkeypatch):
    arguments = tiny_run_arguments(tiny_bert, shared_data, "optim.grad_accum=1", "optim.epochs=1",
                                   "tensorboard=false", "eval_before_training=true")  # 32 examples: 4 steps
    evaluate = Trainer.evaluate

    def signalled(self, *args, **kwargs):
        if self.step == 0:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.SIG_IGN):
                raise RuntimeError("no handler for SIGTERM during the step-0 evaluation")
            os.kill(os.getpid(), signal.SIGTERM)  # as from SLURM
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "evaluate", signalled)
    run = tmp_path / "run"
    cfg = compose([*arguments, f"output_dir={run}"])
    with pytest.raises(Stopped) as stopped:
        Trainer(cfg).fit()
    assert (str(stopped.value), stopped.value.exit_code) == (
        f"stopped by SIGTERM after step 0 of 4 (epoch 1); checkpoint step_00000000.pt saved in {run}: run the same "
        "command again to resume", 143)
    assert (run / "checkpoints" / "step_00000000.pt").is_file() and not (run / "results.json").exists()
    monkeypatch.setattr(Trainer, "evaluate", evaluate)
    results = Trainer(cfg).fit()
    assert results["step"] == 4 and [record["step"] for record in results["history"]][:2] == [0, 4]
