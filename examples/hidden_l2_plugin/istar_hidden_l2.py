"""A third-party criterion: the task loss plus an L2 penalty on the last layer's token states."""
from dataclasses import dataclass

from istar_plugin.criterions import CriterionOutput, task_loss
from istar_plugin.registry import CRITERIONS


@dataclass
class HiddenL2Config:
    weight: float = 0.01


@CRITERIONS.register("hidden_l2", HiddenL2Config)
class HiddenL2:
    def __init__(self, cfg, kind):
        self.cfg, self.kind = cfg, kind

    def hooks(self):
        return []

    def __call__(self, model, output, batch):
        base = task_loss(self.kind, output, batch)
        penalty = self.cfg.weight * model.last_layer_tokens(output).square().mean()
        return CriterionOutput(base + penalty, {"task_loss": base.detach(), "penalty": penalty.detach()})
