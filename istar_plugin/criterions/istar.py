"""I-STAR (Rudman & Eickhoff, ICLR 2024): the task loss plus ``lam * (1 - IsoScore*)`` of the token cloud.

>>> import torch
>>> cloud = [torch.randn(50, 8, requires_grad=True) for _ in range(2)]
>>> loss, score = istar_loss(torch.tensor(0.7), cloud, shrinkage_cov=torch.eye(8), zeta=0.2, lam=-1.0)
>>> bool(loss < 0.7)  # lambda < 0 rewards anisotropy: the loss drops below the task loss
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from torch import Tensor

from ..isotropy import isoscore_star, pooled_isoscore_star
from ..models.encoder import padded_token_cloud
from ..registry import CRITERIONS
from .shrinkage import ShrinkageHook
from .task import CriterionOutput, CrossEntropyCriterion, task_loss


def istar_loss(
    loss: Tensor,
    cloud: Sequence[Tensor],
    shrinkage_cov: Optional[Tensor],
    zeta: float,
    lam: float,
    pooled: bool = False,
) -> tuple[Tensor, Tensor]:
    """I-STAR: ``loss + lam * (1 - IsoScore*(cloud, zeta, Sigma_S))``; returns (total, IsoScore*).

    The score is computed in float32 outside autocast.

    ``pooled``: under torch.distributed, score the union of every rank's cloud (the single-GPU semantics
    of the paper at the same global batch) instead of this rank's alone.
    """
    score_fn = pooled_isoscore_star if pooled else isoscore_star
    score = score_fn([chunk.float() for chunk in cloud], shrinkage_cov, zeta)
    return loss + lam * (1.0 - score), score


@dataclass
class IStarConfig:
    lam: float = -1.0
    zeta: float = 0.2
    shrinkage_points: int = 250_000
    layers: Optional[list[int]] = None  # hidden_states indices (0 = embeddings); None = every transformer layer
    shrinkage_mode: str = "eval"  # the official code computes Sigma_S with dropout off
    distributed_cloud: str = "pooled"  # under DDP: "pooled" (all ranks' tokens, as one GPU) or "local"
    padding: str = "exclude"  # "include": padded positions are points too, in the penalty and Sigma_S (official code)

    def __post_init__(self) -> None:
        if not 0.0 <= self.zeta <= 1.0:
            raise ValueError(f"criterion.zeta must lie in [0, 1], got {self.zeta}")
        if self.shrinkage_points < 2:
            raise ValueError(f"criterion.shrinkage_points must be at least 2, got {self.shrinkage_points}")
        if self.shrinkage_mode not in ("eval", "train"):
            raise ValueError(f"criterion.shrinkage_mode {self.shrinkage_mode!r} unknown; choose one of: eval, train")
        if self.distributed_cloud not in ("pooled", "local"):
            raise ValueError(f"criterion.distributed_cloud {self.distributed_cloud!r} unknown; choose one of: pooled, local")
        if self.padding not in ("exclude", "include"):
            raise ValueError(f"criterion.padding {self.padding!r} unknown; choose one of: exclude, include")
        if self.layers is not None and (not self.layers or len(set(self.layers)) < len(self.layers)):
            raise ValueError(f"criterion.layers={list(self.layers)} must name each layer once (1..L, or 0 for the "
                             "embeddings), or be null for every transformer layer")


@CRITERIONS.register("istar", IStarConfig)
class IStarCriterion(CrossEntropyCriterion):
    """I-STAR: task loss plus ``lam * (1 - IsoScore*)`` of the all-layer token cloud, shrunk towards Sigma_S.

    ``padding="include"`` scores every position of the padded batch (and estimates Sigma_S from them), as the
    official code does; the default scores real tokens only. Sigma_S (``shrinkage_cov``) is kept current by the :class:`~istar_plugin.hooks.ShrinkageHook` this
    criterion hands the trainer: before training and after every epoch.
    """

    def __init__(self, cfg: IStarConfig, kind: str):
        super().__init__(cfg, kind)
        self.shrinkage_cov: Optional[Tensor] = None

    def constant_penalty(self) -> Optional[str]:
        if self.cfg.zeta == 1 and self.cfg.lam != 0:
            return ("criterion.zeta=1: Sigma_zeta is Sigma_S alone, so IsoScore* does not depend on the batch and the "
                    "penalty is a constant with no gradient; the run trains on the task loss alone")
        return super().constant_penalty()

    def hooks(self) -> list:
        return [ShrinkageHook(self)]

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        if self.cfg.zeta > 0 and self.shrinkage_cov is None:
            raise RuntimeError("istar: Sigma_S has not been computed yet (the ShrinkageHook computes it at each epoch start)")
        base = task_loss(self.kind, output, batch)
        cloud = padded_token_cloud(model, output, self.cfg.layers, self.cfg.padding == "include")
        pooled = self.cfg.distributed_cloud == "pooled"
        loss, score = istar_loss(base, cloud, self.shrinkage_cov, self.cfg.zeta, self.cfg.lam, pooled)
        stats = {"task_loss": base.detach(), "penalty": (loss - base).detach(), "isoscore_star": score.detach()}
        return CriterionOutput(loss, stats)
