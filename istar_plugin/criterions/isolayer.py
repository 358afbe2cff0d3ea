"""The Isotropy Layer (section B of the comparison papers): one d x d layer before a frozen, fine-tuned head.

Stage 2 of a two-stage method: start from a fine-tuned run (``init_from=RUN_DIR``), freeze the encoder
and the head, insert a linear d -> d layer between the representation the head consumes and the head
(:meth:`~istar_plugin.models.HFEncoder.insert_before_head`) and train that layer alone on the joint loss
``L1`` = the task loss through the frozen head and ``L2 = -log IsoScore(Y)``, Y the batch's layer outputs,
balanced by running means (:func:`balanced_joint_loss`).

Choices the paper leaves open, decided here (configurable where marked):

- the layer: ``Linear(d, d)``, no activation, weight initialised to the identity, bias (``bias``, on)
  to zero, so training starts from the fine-tuned model's exact behaviour;
- ``alpha`` weights the *balanced* terms, ``alpha * Lhat_1 + (1 - alpha) * Lhat_2``: the paper's
  ``(Lhat_1 + Lhat_2) / 2`` is ``alpha = 0.5`` (the default); ``balance=false`` trains on the
  unbalanced ``alpha * L1 + (1 - alpha) * L2``;
- the running means start at the first batch's losses (``initial_means=first_batch``; ``one``: 1.0);
- ``k`` counts training batches (micro-batches) from 0 and does not restart at each epoch
  (``restart_per_epoch``);
- each batch is normalised with the means as they stood before it, then the means are updated
  (``update=after``; ``before`` updates first and normalises with the new means);
- the ratios ``Lbar / Lbar_i`` are constants in the backward pass (running statistics); with
  ``update=before`` and ``detach_means=false`` the fresh means keep this batch's gradient;
- log 0: ``L2 = -log(max(IsoScore, eps))``; a batch of one example has no covariance: it trains on the
  task loss alone and leaves the means unchanged;
- the frozen encoder runs without dropout and its outputs are computed once per example
  (``model.frozen_dropout=false``, the default; ``true``: the model's dropout at every step, no cache);
- beyond the paper, ``zeta > 0`` scores IsoScore* of the batch shrunk towards Sigma_S, the covariance of
  the layer's outputs over ``shrinkage_points`` training examples (the I-STAR paper's remedy for a batch
  smaller than d), recomputed by the same :class:`~istar_plugin.hooks.ShrinkageHook` as I-STAR.

Classification and regression tasks (L1 is then the mean squared error); extractive QA is refused (its
head reads every token, there is no single representation to transform).

>>> import torch
>>> task, iso = torch.tensor(0.7), torch.tensor(3.0)
>>> loss, means = balanced_joint_loss(task, iso, None, step=0)  # first batch: both terms scaled to (0.7 + 3) / 2
>>> round(loss.item(), 4), [round(m, 4) for m in means]
(1.85, [0.7, 3.0])
>>> loss, means = balanced_joint_loss(torch.tensor(1.4), iso, means, step=1)
>>> round(loss.item(), 4), [round(m, 4) for m in means]  # Lhat_1 = 1.4 * 1.85 / 0.7: L1 doubled, its term doubles
(2.775, [0.7525, 3.0])
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ..hooks import Hook
from ..isotropy import isoscore_star
from ..registry import CRITERIONS
from .shrinkage import ShrinkageHook
from .configs import IsoLayerConfig, IsoLayerSetup
from .task import Criterion, CriterionOutput, task_loss

LAYER_NAME = "isolayer"


def balanced_joint_loss(
    task: Tensor,
    isotropy: Tensor,
    means: Optional[tuple[float, float]],
    step: int,
    alpha: float = 0.5,
    smoothing: float = 0.15,
    update: str = "after",
    detach_means: bool = True,
    eps: float = 1e-12,
) -> tuple[Tensor, tuple[float, float]]:
    """The paper's moving-average balancing of two losses; returns (loss, updated means).

    ``means`` (Lbar_1, Lbar_2) before this batch (None: start at this batch's losses); ``step`` is k.
    Update: ``Lbar_i <- L_i * s/(1+k) + Lbar_i * (1 - s/(1+k))``; normalisation ``Lhat_i = L_i * Lbar / Lbar_i``
    with ``Lbar = (Lbar_1 + Lbar_2) / 2``; loss ``alpha * Lhat_1 + (1 - alpha) * Lhat_2``.
    """
    losses = (task, isotropy)
    current = tuple(float(loss.detach()) for loss in losses)
    old = current if means is None else means
    rate = smoothing / (1 + step)
    new = tuple(value * rate + mean * (1 - rate) for value, mean in zip(current, old))
    if update == "after":
        used: tuple = old
    elif update == "before":
        used = new if detach_means else tuple(loss * rate + mean * (1 - rate) for loss, mean in zip(losses, old))
    else:
        raise ValueError(f"update {update!r} unknown; choose one of: after, before")
    overall = (used[0] + used[1]) / 2
    hats = [loss * overall / max(mean, eps) if isinstance(mean, float) else loss * overall / mean.clamp_min(eps)
            for loss, mean in zip(losses, used)]
    return alpha * hats[0] + (1 - alpha) * hats[1], new


def isotropy_loss(points: Tensor, shrinkage_cov: Optional[Tensor] = None, zeta: float = 0.0,
                  eps: float = 1e-12) -> tuple[Tensor, Tensor]:
    """``-log(max(IsoScore*(points, zeta, Sigma_S), eps))`` (zeta 0: IsoScore); returns (loss, score).

    >>> loss, score = isotropy_loss(torch.ones(4, 3))  # identical points: IsoScore 0, log guarded
    >>> round(loss.item(), 2), score.item()
    (27.63, 0.0)
    """
    score = isoscore_star(points.float(), shrinkage_cov, zeta)
    return -torch.log(score.clamp_min(eps)), score


class _BalanceState(Hook):
    """Saves the running means and k with every checkpoint; restarts k at each epoch if configured."""

    def __init__(self, criterion: "IsoLayerCriterion"):
        self.criterion = criterion

    def on_epoch_start(self, run, epoch: int) -> None:
        if self.criterion.cfg.restart_per_epoch and not run.mid_epoch:
            self.criterion.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"means": self.criterion.means, "step": self.criterion.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.criterion.means, self.criterion.step = state["means"], state["step"]


@CRITERIONS.register("isolayer", IsoLayerConfig)
class IsoLayerCriterion(IsoLayerSetup, Criterion):
    """Freeze the model, insert the identity-initialised Isotropy Layer before the head, train it on the joint loss."""

    def __init__(self, cfg: IsoLayerConfig, kind: str):
        super().__init__(cfg, kind)
        self.layer: Optional[torch.nn.Linear] = None
        self.means: Optional[tuple[float, float]] = (1.0, 1.0) if cfg.initial_means == "one" else None
        self.step = 0
        self.shrinkage_cov: Optional[Tensor] = None

    def adapt(self, model) -> None:
        size = model.hidden_size
        self.layer = torch.nn.Linear(size, size, bias=self.cfg.bias)
        with torch.no_grad():
            self.layer.weight.copy_(torch.eye(size))
            if self.layer.bias is not None:
                self.layer.bias.zero_()
        model.requires_grad_(False)
        model.insert_before_head(LAYER_NAME, self.layer)
        self.layer.requires_grad_(True)

    def hooks(self) -> list:
        return [_BalanceState(self), *([ShrinkageHook(self)] if self.cfg.zeta > 0 else [])]

    def shrinkage_cloud(self, model, output) -> list[Tensor]:
        """The points Sigma_S is estimated from: the layer's outputs (used by the ShrinkageHook)."""
        return [output.inserted[LAYER_NAME]]

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        cfg = self.cfg
        task = task_loss(self.kind, output, batch)
        points = output.inserted[LAYER_NAME]
        if points.shape[0] < 2:
            return CriterionOutput(task, {"task_loss": task.detach()})
        if cfg.zeta > 0 and self.shrinkage_cov is None:
            raise RuntimeError("isolayer: Sigma_S has not been computed yet "
                               "(the ShrinkageHook computes it at each epoch start)")
        isotropy, score = isotropy_loss(points, self.shrinkage_cov, cfg.zeta, cfg.eps)
        if cfg.balance:
            loss, self.means = balanced_joint_loss(task, isotropy, self.means, self.step, cfg.alpha, cfg.smoothing,
                                                   cfg.update, cfg.detach_means, cfg.eps)
        else:
            loss = cfg.alpha * task + (1 - cfg.alpha) * isotropy
        self.step += 1
        stats = {"task_loss": task.detach(), "isotropy_loss": isotropy.detach(), "batch_isoscore": score.detach()}
        if self.means is not None:
            stats.update(mean_task_loss=torch.tensor(self.means[0]), mean_isotropy_loss=torch.tensor(self.means[1]))
        return CriterionOutput(loss, stats)
