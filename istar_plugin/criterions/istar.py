"""I-STAR (Rudman & Eickhoff, ICLR 2024): the task loss plus ``lam * (1 - IsoScore*)`` of the token cloud.

>>> import torch
>>> cloud = [torch.randn(50, 8, requires_grad=True) for _ in range(2)]
>>> loss, score = istar_loss(torch.tensor(0.7), cloud, shrinkage_cov=torch.eye(8), zeta=0.2, lam=-1.0)
>>> bool(loss < 0.7)  # lambda < 0 rewards anisotropy: the loss drops below the task loss
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from ..registry import CRITERIONS
from ..settings import check_fields, setting
from .task import CriterionOutput, CrossEntropyCriterion, task_loss

if TYPE_CHECKING:
    from torch import Tensor

SHRINKAGE_MODES = ("eval", "train")
UNIT = "{key} must lie in [0, 1], got {value}"


@dataclass
class IStarConfig:
    lam: float = setting(-1.0, help="weight of the penalty 1 - IsoScore* (negative: towards anisotropy)")
    zeta: float = setting(0.2, help="shrinkage of the batch covariance towards Sigma_S", low=0, high=1, refused=UNIT)
    shrinkage_points: int = setting(250_000, help="token states Sigma_S is estimated from", low=2,
                                    refused="{key} must be at least 2, got {value}")
    layers: Optional[list[int]] = setting(None, help="hidden_states indices (0 = embeddings, or START:STOP); None: "
                                          "every transformer layer")
    shrinkage_mode: str = setting("eval", help="dropout off (eval, the official code) or on (train) while Sigma_S is "
                                  "computed", choices=SHRINKAGE_MODES)
    distributed_cloud: str = setting("pooled", help='under DDP: "pooled" (all ranks\' tokens, as one GPU) or "local"',
                                     choices=("pooled", "local"))
    padding: str = setting("exclude", help='"include": padded positions are points too, in the penalty and Sigma_S '
                           "(official code)", choices=("exclude", "include"))

    def __post_init__(self) -> None:
        check_fields(self, "criterion.")
        if self.layers is not None and (not self.layers or len(set(self.layers)) < len(self.layers)):
            raise ValueError(f"criterion.layers={list(self.layers)} must name each layer once (1..L, or 0 for the "
                             "embeddings), or be null for every transformer layer")


def istar_loss(loss: Tensor, cloud: Sequence[Tensor], shrinkage_cov: Optional[Tensor], zeta: float, lam: float,
               pooled: bool = False) -> tuple[Tensor, Tensor]:
    """``loss + lam * (1 - IsoScore*(cloud, zeta, Sigma_S))`` in float32, and IsoScore* (``pooled``: of every rank)."""
    from ..isotropy import isoscore_star, pooled_isoscore_star

    score = (pooled_isoscore_star if pooled else isoscore_star)([chunk.float() for chunk in cloud], shrinkage_cov, zeta)
    return loss + lam * (1.0 - score), score


@CRITERIONS.register("istar", IStarConfig)
class IStarCriterion(CrossEntropyCriterion):
    """Task loss plus ``lam * (1 - IsoScore*)`` of the all-layer token cloud, shrunk towards Sigma_S."""

    shrinkage_cov: Optional[Tensor] = None  # set by the ShrinkageHook

    def constant_penalty(self) -> Optional[str]:
        if self.cfg.zeta == 1 and self.cfg.lam != 0:
            return ("criterion.zeta=1: Sigma_zeta is Sigma_S alone, so IsoScore* does not depend on the batch and the "
                    "penalty is a constant with no gradient; the run trains on the task loss alone")
        return super().constant_penalty()

    def hooks(self) -> list:
        from .shrinkage import ShrinkageHook

        return [ShrinkageHook(self)]

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        if self.cfg.zeta > 0 and self.shrinkage_cov is None:
            raise RuntimeError("istar: Sigma_S has not been computed yet "
                               "(the ShrinkageHook computes it at each epoch start)")
        from ..models.encoder import padded_token_cloud

        base = task_loss(self.kind, output, batch)
        cloud = padded_token_cloud(model, output, self.cfg.layers, self.cfg.padding == "include")
        loss, score = istar_loss(base, cloud, self.shrinkage_cov, self.cfg.zeta, self.cfg.lam,
                                 pooled=self.cfg.distributed_cloud == "pooled")
        return CriterionOutput(loss, {"task_loss": base.detach(), "penalty": (loss - base).detach(),
                                      "isoscore_star": score.detach()})
