"""The Isotropy Layer: a d x d layer before a fine-tuned run's frozen head, trained on task loss and -log IsoScore."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..registry import CRITERIONS
from ..settings import check_fields, setting
from .istar import SHRINKAGE_MODES, UNIT
from .task import Criterion, CriterionOutput, task_loss

if TYPE_CHECKING:
    from torch import Tensor

LAYER_NAME = "isolayer"


@dataclass
class IsoLayerConfig:
    alpha: float = setting(0.5, help="the task loss's share of the joint loss", low=0, high=1, refused=UNIT)
    smoothing: float = setting(0.15, help="the paper's s: smoothing of the running means", low=0, high=1,
                               low_open=True, refused="{key} must lie in (0, 1], got {value}")
    balance: bool = setting(True, help="balance the two losses by their running means")
    initial_means: str = setting("first_batch", help="the running means' start", choices=("first_batch", "one"))
    update: str = setting("after", help="normalise with the means before or after this batch's update",
                          choices=("after", "before"))
    detach_means: bool = setting(True, help="no gradient through the running means")
    restart_per_epoch: bool = setting(False, help="restart the balance's step count at each epoch")
    bias: bool = setting(True, help="the Isotropy Layer has a bias")
    eps: float = setting(1e-12, help="floor of IsoScore inside the log", low=0, low_open=True,
                         refused="{key} must be positive (it guards log 0), got {value}")
    zeta: float = setting(0.0, help="> 0: IsoScore* shrunk towards Sigma_S of the layer's outputs (beyond the paper)",
                          low=0, high=1, refused=UNIT)
    shrinkage_points: int = setting(250_000, help="examples (one output each) for Sigma_S, capped by the training set",
                                    low=2, refused="{key} must be at least 2, got {value}")
    shrinkage_mode: str = setting("eval", help="dropout off (eval) or on (train) while Sigma_S is computed",
                                  choices=SHRINKAGE_MODES)

    def __post_init__(self) -> None:
        check_fields(self, "criterion.")


def balanced_joint_loss(task: Tensor, isotropy: Tensor, means: Optional[tuple[float, float]], step: int,
                        alpha: float = 0.5, smoothing: float = 0.15, update: str = "after", detach_means: bool = True,
                        eps: float = 1e-12) -> tuple[Tensor, tuple[float, float]]:
    """``alpha * Lhat_1 + (1 - alpha) * Lhat_2``, ``Lhat_i = L_i * mean(Lbar) / Lbar_i``; returns (loss, updated means).
    ``means``: (Lbar_1, Lbar_2) before this batch (None: this batch's losses), updated by ``s / (1 + step)``."""
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
    """``-log(max(IsoScore*(points, zeta, Sigma_S), eps))`` (zeta 0: IsoScore); returns (loss, score)."""
    import torch

    from ..isotropy import isoscore_star

    score = isoscore_star(points.float(), shrinkage_cov, zeta)
    return -torch.log(score.clamp_min(eps)), score


@CRITERIONS.register("isolayer", IsoLayerConfig)
class IsoLayerCriterion(Criterion):
    """Freeze the model, insert the identity-initialised Isotropy Layer before the head, train it on the joint loss."""

    needs_init_from = True

    @classmethod
    def check_setup(cls, cfg, adapter: type, kind: str) -> None:
        if kind not in ("classification", "regression"):
            raise ValueError("criterion isolayer needs one representation per example before the head: it supports "
                             f"classification and regression tasks, not {kind} (whose head reads every token)")
        if not hasattr(adapter, "insert_before_head"):
            raise ValueError(f"criterion isolayer needs a model adapter with insert_before_head; {adapter.__name__} "
                             "has none")

    def __init__(self, cfg: IsoLayerConfig, kind: str):
        super().__init__(cfg, kind)
        self.layer = None  # the inserted torch.nn.Linear
        self.means: Optional[tuple[float, float]] = (1.0, 1.0) if cfg.initial_means == "one" else None
        self.step = 0
        self.shrinkage_cov: Optional[Tensor] = None

    def adapt(self, model) -> None:
        import torch

        self.layer = torch.nn.Linear(model.hidden_size, model.hidden_size, bias=self.cfg.bias)
        torch.nn.init.eye_(self.layer.weight)
        if self.layer.bias is not None:
            torch.nn.init.zeros_(self.layer.bias)
        model.requires_grad_(False)
        model.insert_before_head(LAYER_NAME, self.layer)
        self.layer.requires_grad_(True)

    def hooks(self) -> list:
        from .modules import BalanceState
        from .shrinkage import ShrinkageHook

        return [BalanceState(self), *([ShrinkageHook(self)] if self.cfg.zeta > 0 else [])]

    def shrinkage_cloud(self, model, output) -> list[Tensor]:
        """The points Sigma_S is estimated from: the layer's outputs."""
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
            import torch

            stats.update(mean_task_loss=torch.tensor(self.means[0]), mean_isotropy_loss=torch.tensor(self.means[1]))
        return CriterionOutput(loss, stats)
