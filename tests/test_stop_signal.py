"""SIGTERM and SIGINT delivered to this process during a tiny run (the fast share of test_signals.py, which sends
them to a real istar-run process): the run stops at a step's end with a checkpoint of that step and exit status
128 + the signal, and the resumed run logs each step once, with an uninterrupted run's losses."""
import json
import os
import re
import signal

import pytest
from helpers import tiny_run_arguments

from istar_plugin.config import compose
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
