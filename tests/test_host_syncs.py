"""Host-device syncs of the training loop, counted on CPU the way ``torch.cuda.set_sync_debug_mode`` would flag
them on a GPU: every op that hands a device value to the host (``.item()``, ``float()``, ``bool()``, ``nonzero``,
boolean masking) and every ``.tolist()`` / ``.numpy()``, attributed to the code that asked for it."""
import traceback

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from istar_plugin.config import compose
from istar_plugin.hooks import Hook
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments

SYNC_OPS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::is_nonzero", "aten::equal"}


def caller() -> str:
    """The innermost frame outside torch: who asked for the host value."""
    frames = [f for f in traceback.extract_stack()[:-2] if "/torch/" not in f.filename and f.filename != __file__]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


class SyncCounter(TorchDispatchMode):
    """Counts syncs by caller; those asked for inside transformers' own model code are kept apart."""

    def __init__(self, monkeypatch):
        super().__init__()
        self.syncs: list[str] = []
        for method in ("tolist", "numpy"):
            original = getattr(torch.Tensor, method)

            def counted(tensor, *args, _original=original, **kwargs):
                self.syncs.append(caller())
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, method, counted)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in SYNC_OPS:
            self.syncs.append(caller())
        return func(*args, **(kwargs or {}))

    def runner_syncs(self) -> list[str]:
        return [where for where in self.syncs if "/transformers/" not in where]


class SyncsPerStep(Hook):
    def __init__(self, counter):
        self.counter, self.at_step_end = counter, {}

    def on_step_end(self, trainer, step, stats):
        self.at_step_end[step] = len(self.counter.runner_syncs())


@pytest.mark.parametrize("criterion", ["istar", "cross_entropy"])
def test_the_training_loop_syncs_once_per_logging_interval(tiny_bert, shared_data, tmp_path, monkeypatch, criterion):
    cfg = compose(tiny_run_arguments(
        tiny_bert, shared_data, "data.max_train_samples=64", "optim.grad_accum=2", "optim.epochs=1", "log_every=2",
        "eval_before_training=false", f"output_dir={tmp_path / 'run'}", f"criterion={criterion}",
        "criterion.shrinkage_points=300" if criterion == "istar" else "seed=42",
    ))
    trainer = Trainer(cfg)
    counter = SyncCounter(monkeypatch)
    steps = SyncsPerStep(counter)
    trainer.hooks.append(steps)
    with counter:
        trainer.fit()
    assert sorted(steps.at_step_end) == [1, 2, 3, 4]  # 64 examples / (8 x 2) per step
    per_step = {step: steps.at_step_end[step] - steps.at_step_end[step - 1] for step in (2, 3, 4)}
    # only the reading of each interval's statistics, together with the divergence guard's state
    assert per_step == {2: 1, 3: 0, 4: 1}, counter.runner_syncs()
    assert all("divergence_guard.py" in where
               for where in counter.runner_syncs()[steps.at_step_end[1]:steps.at_step_end[4]])
