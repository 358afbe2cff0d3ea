"""CosReg (Gao et al. 2019): the task loss plus ``lam`` times a mean pairwise cosine similarity.

>>> import torch
>>> tokens = torch.ones(4, 3)  # identical directions: mean cosine 1
>>> total, cosine = cosreg_loss(torch.tensor(0.5), tokens, lam=2.0)
>>> round(total.item(), 4), round(cosine.item(), 4)
(2.5, 1.0)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..isotropy import average_cosine_similarity
from ..registry import CRITERIONS
from .task import CriterionOutput, CrossEntropyCriterion, task_loss


def cosreg_loss(loss: Tensor, last_layer_tokens: Tensor, lam: float) -> tuple[Tensor, Tensor]:
    """CosReg (Gao et al. 2019): ``loss + lam * mean cosine over pairs i != j``; returns (total, mean cosine)."""
    with torch.autocast(device_type=last_layer_tokens.device.type, enabled=False):
        cosine = average_cosine_similarity(last_layer_tokens.float())
    return loss + lam * cosine, cosine


@dataclass
class CosRegConfig:
    lam: float = 1.0


@CRITERIONS.register("cosreg", CosRegConfig)
class CosRegCriterion(CrossEntropyCriterion):
    """Task loss plus ``lam`` times the mean pairwise cosine of last-layer token states (padding excluded)."""

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        base = task_loss(self.kind, output, batch)
        loss, cosine = cosreg_loss(base, model.last_layer_tokens(output), self.cfg.lam)
        return CriterionOutput(loss, {"task_loss": base.detach(), "penalty": (loss - base).detach(), "cosine": cosine.detach()})


