"""Hooks see the run through a read-only RunView, act through its TrainingControl, and are called in order
by one HookDispatcher; the user-facing lines of a resumed run and of a head restored from a checkpoint."""
import pytest

from istar_plugin.config import compose
from istar_plugin.hooks import Hook, HookDispatcher, RunView, TrainingControl
from istar_plugin.analysis.loading import load_run
from istar_plugin.training.export import export_checkpoint
from istar_plugin.training.trainer import Trainer
from helpers import CrashAt, tiny_run_arguments


def tiny_config(tiny_bert, shared_data, output_dir, *extra):
    return compose(tiny_run_arguments(tiny_bert, shared_data, "data.max_eval_samples=16", "optim.grad_accum=1",
                                      "optim.epochs=3", "log_every=1", "criterion=cross_entropy", "progress=true",
                                      f"output_dir={output_dir}", *extra))


class Recorder(Hook):
    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def on_fit_start(self, run):
        self.calls.append((self.name, "fit_start"))

    def on_epoch_end(self, run, epoch):
        self.calls.append((self.name, "epoch_end", epoch))


class StopAfterFirstEpoch(Hook):
    def __init__(self):
        self.epochs_ended, self.steps = [], []

    def on_step_end(self, run, step, stats):
        self.steps.append(step)

    def on_epoch_end(self, run, epoch):
        self.epochs_ended.append(epoch)
        run.control.request_stop("one epoch is enough")


class Snoop(Hook):
    def __init__(self):
        self.seen = {}

    def on_fit_start(self, run):
        self.seen["is_view"] = isinstance(run, RunView)
        self.seen["members"] = (run.step, run.seed, run.rank, run.world_size, run.mid_epoch, len(run.train_features))
        for name in ("history", "optimizer", "cfg", "guard", "_record_evaluation", "hooks", "trainer", "__dict__"):
            with pytest.raises(AttributeError):
                getattr(run, name)
        for name, value in (("step", 99), ("history", []), ("model", None)):
            with pytest.raises(AttributeError, match="read-only"):
                setattr(run, name, value)
        self.seen["refused"] = True


def test_the_dispatcher_calls_every_hook_in_order():
    calls = []
    control = TrainingControl()
    dispatcher = HookDispatcher([Recorder("a", calls), Recorder("b", calls)], view=control)
    dispatcher.fit_start()
    dispatcher.epoch_end(0)
    dispatcher.hooks.append(Recorder("c", calls))  # the live list: a hook added later is called too
    dispatcher.epoch_end(1)
    assert calls == [("a", "fit_start"), ("b", "fit_start"), ("a", "epoch_end", 0), ("b", "epoch_end", 0),
                     ("a", "epoch_end", 1), ("b", "epoch_end", 1), ("c", "epoch_end", 1)]
    with pytest.raises(ValueError, match="unknown hook event"):
        dispatcher.dispatch("on_batch_start")


def test_training_control_keeps_the_first_stop_reason():
    control = TrainingControl()
    assert not control.should_stop and control.take_evaluation_request() is None
    control.request_stop("first")
    control.request_stop("second")
    assert control.should_stop and control.stop_reason == "first"
    control.request_evaluation(weights_from_step=3)
    assert control.take_evaluation_request() == {"weights_from_step": 3}
    assert control.take_evaluation_request() is None


def test_a_hook_sees_a_read_only_view_and_stops_training_after_the_epoch(tiny_bert, shared_data, tmp_path):
    snoop, stopper = Snoop(), StopAfterFirstEpoch()
    cfg = tiny_config(tiny_bert, shared_data, tmp_path / "run", "progress=false")
    results = Trainer(cfg, hooks=[snoop, stopper]).fit()
    assert snoop.seen == {"is_view": True, "members": (0, cfg.seed, 0, 1, False, 32), "refused": True}
    assert stopper.epochs_ended == [0] and stopper.steps == [1, 2, 3, 4]  # 32 examples / 8: one epoch of 4 steps
    assert results["step"] == 4 and results["epoch"] == 1



def test_a_resumed_run_says_where_it_resumes_and_reports_no_fresh_head(tiny_bert, shared_data, tmp_path, capfd):
    run_dir = tmp_path / "run"
    cfg = tiny_config(tiny_bert, shared_data, run_dir, "save_every=2", "keep_checkpoints=5")
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, hooks=[CrashAt(7)]).fit()
    first = capfd.readouterr().err
    assert "newly initialised: classifier.bias, classifier.weight" in first
    assert "resuming" not in first

    Trainer(cfg).fit()
    resumed = capfd.readouterr().err
    assert f"resuming {run_dir} from step 6 of 12 (checkpoint step_00000006.pt)" in resumed.splitlines()
    assert "newly initialised" not in resumed

    Trainer(cfg).fit()  # finished: its results are returned, nothing is loaded into a fresh head
    again = capfd.readouterr().err
    assert "already complete" in again and "newly initialised" not in again and "resuming" not in again

    export_checkpoint(run_dir, out=tmp_path / "exported")
    load_run(run_dir)
    assert "newly initialised" not in capfd.readouterr().err


def test_a_hook_written_for_the_old_stop_training_attribute_is_refused_not_ignored():
    class OldStyle(Hook):
        stop_training = False

    with pytest.raises(TypeError,
                       match="OldStyle has a stop_training attribute, which is no longer read; .*request_stop"):
        HookDispatcher([OldStyle()], view=None)
