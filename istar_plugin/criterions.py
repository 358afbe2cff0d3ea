"""Training objectives: the task loss alone, CosReg and I-STAR, each a pure function plus a registered class.

A criterion is called as ``criterion(model, output, batch) -> CriterionOutput`` where ``model`` is the
(unwrapped) adapter, ``output`` its :class:`~istar_plugin.models.EncoderOutput` and ``batch`` the tensors.

>>> import torch
>>> cloud = [torch.randn(50, 8, requires_grad=True) for _ in range(2)]
>>> loss, score = istar_loss(torch.tensor(0.7), cloud, shrinkage_cov=torch.eye(8), zeta=0.2, lam=-1.0)
>>> bool(loss < 0.7)  # lambda < 0 rewards anisotropy: the loss drops below the task loss
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .isotropy import average_cosine_similarity, isoscore_star, pooled_isoscore_star
from .registry import CRITERIONS

__all__ = [
    "CriterionOutput",
    "task_loss",
    "cosreg_loss",
    "istar_loss",
    "CrossEntropyCriterion",
    "CosRegCriterion",
    "IStarCriterion",
]


@dataclass
class CriterionOutput:
    """The loss to back-propagate and additive statistics (detached scalars) for logging."""

    loss: Tensor
    stats: dict[str, Tensor] = field(default_factory=dict)


def task_loss(kind: str, output, batch: dict[str, Tensor]) -> Tensor:
    """Cross-entropy (classification), mean squared error (regression) or mean start/end cross-entropy (QA).

    >>> import torch
    >>> from types import SimpleNamespace
    >>> out = SimpleNamespace(logits=torch.tensor([[0.0, 0.0]]))
    >>> round(task_loss("classification", out, {"labels": torch.tensor([1])}).item(), 4)  # log 2
    0.6931
    """
    if kind == "classification":
        return F.cross_entropy(output.logits.float(), batch["labels"])
    if kind == "regression":
        return F.mse_loss(output.logits.float().squeeze(-1), batch["labels"].float())
    if kind == "extractive_qa":
        length = output.start_logits.shape[1]
        start = batch["start_positions"].clamp(0, length - 1)
        end = batch["end_positions"].clamp(0, length - 1)
        return 0.5 * (F.cross_entropy(output.start_logits.float(), start) + F.cross_entropy(output.end_logits.float(), end))
    raise ValueError(f"unknown task kind {kind!r}; choose one of: classification, regression, extractive_qa")


def cosreg_loss(loss: Tensor, last_layer_tokens: Tensor, lam: float) -> tuple[Tensor, Tensor]:
    """CosReg (Gao et al. 2019): ``loss + lam * mean cosine over pairs i != j``; returns (total, mean cosine)."""
    with torch.autocast(device_type=last_layer_tokens.device.type, enabled=False):
        cosine = average_cosine_similarity(last_layer_tokens.float())
    return loss + lam * cosine, cosine


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
class CrossEntropyConfig:
    """The task loss alone (no configuration)."""


@CRITERIONS.register("cross_entropy", CrossEntropyConfig)
class CrossEntropyCriterion:
    """Task loss only: the baseline every regulariser is compared with."""

    def __init__(self, cfg: CrossEntropyConfig, kind: str):
        self.cfg, self.kind = cfg, kind

    def hooks(self) -> list:
        return []

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        loss = task_loss(self.kind, output, batch)
        return CriterionOutput(loss, {"task_loss": loss.detach()})


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


@dataclass
class IStarConfig:
    lam: float = -1.0
    zeta: float = 0.2
    shrinkage_points: int = 250_000
    layers: Optional[list[int]] = None  # hidden_states indices (0 = embeddings); None = every transformer layer
    shrinkage_mode: str = "eval"  # the official code computes Sigma_S with dropout off
    distributed_cloud: str = "pooled"  # under DDP: "pooled" (all ranks' tokens, as one GPU) or "local"

    def __post_init__(self) -> None:
        if not 0.0 <= self.zeta <= 1.0:
            raise ValueError(f"criterion.zeta must lie in [0, 1], got {self.zeta}")
        if self.shrinkage_points < 2:
            raise ValueError(f"criterion.shrinkage_points must be at least 2, got {self.shrinkage_points}")
        if self.shrinkage_mode not in ("eval", "train"):
            raise ValueError(f"criterion.shrinkage_mode {self.shrinkage_mode!r} unknown; choose one of: eval, train")
        if self.distributed_cloud not in ("pooled", "local"):
            raise ValueError(f"criterion.distributed_cloud {self.distributed_cloud!r} unknown; choose one of: pooled, local")


@CRITERIONS.register("istar", IStarConfig)
class IStarCriterion(CrossEntropyCriterion):
    """I-STAR: task loss plus ``lam * (1 - IsoScore*)`` of the all-layer token cloud, shrunk towards Sigma_S.

    Sigma_S (``shrinkage_cov``) is kept current by the :class:`~istar_plugin.hooks.ShrinkageHook` this
    criterion hands the trainer: before training and after every epoch.
    """

    def __init__(self, cfg: IStarConfig, kind: str):
        super().__init__(cfg, kind)
        self.shrinkage_cov: Optional[Tensor] = None

    def hooks(self) -> list:
        from .hooks import ShrinkageHook

        return [ShrinkageHook(self)]

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        if self.cfg.zeta > 0 and self.shrinkage_cov is None:
            raise RuntimeError("istar: Sigma_S has not been computed yet (the ShrinkageHook computes it at each epoch start)")
        base = task_loss(self.kind, output, batch)
        cloud = model.token_cloud(output, self.cfg.layers)
        pooled = self.cfg.distributed_cloud == "pooled"
        loss, score = istar_loss(base, cloud, self.shrinkage_cov, self.cfg.zeta, self.cfg.lam, pooled)
        stats = {"task_loss": base.detach(), "penalty": (loss - base).detach(), "isoscore_star": score.detach()}
        return CriterionOutput(loss, stats)
