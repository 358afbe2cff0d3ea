"""Spectrum control (Wang et al. 2019): pull the word-embedding matrix's singular values towards a decaying target."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..registry import CRITERIONS
from ..settings import check_fields, setting
from .cosreg import WORD_EMBEDDINGS
from .task import CriterionOutput, CrossEntropyCriterion, task_loss

if TYPE_CHECKING:
    from torch import Tensor

DECAYS = ("polynomial", "exponential")


@dataclass
class SpectrumConfig:
    decay: str = setting("polynomial", help="the targets' decay: polynomial c1 * k^gamma or exponential "
                         "c1 * exp(-c2 * k^gamma)", choices=DECAYS)
    lam: float = setting(1e-3, help="weight of the penalty", refused="{key} must be a finite number, got {value}")
    c1: float = setting(1.0, help="the largest target singular value", low=0, low_open=True,
                        refused="{key} must be a positive number (the largest target singular value), got {value}")
    c2: float = setting(0.1, help="exponential only: the rate")
    gamma: Optional[float] = setting(None, help="polynomial: < 0 (default -0.5); exponential: > 0 (default 0.5)")

    penalised_weights = WORD_EMBEDDINGS

    def __post_init__(self) -> None:
        check_fields(self, "criterion.")
        if self.gamma is None:
            self.gamma = {"polynomial": -0.5, "exponential": 0.5}[self.decay]
        if self.decay == "polynomial" and not self.gamma < 0:
            raise ValueError(f"criterion.gamma={self.gamma} does not decay: polynomial c1 * k^gamma needs gamma < 0")
        if self.decay == "exponential" and not (self.gamma > 0 and self.c2 > 0):
            raise ValueError(f"criterion.gamma={self.gamma}, criterion.c2={self.c2} do not decay: exponential "
                             "c1 * exp(-c2 * k^gamma) needs gamma > 0 and c2 > 0")


def spectrum_targets(decay: str, count: int, c1: float, c2: float, gamma: float) -> Tensor:
    """The target singular values ``target_k``, k = 1..count (float64)."""
    import torch

    k = torch.arange(1, count + 1, dtype=torch.float64)
    if decay == "polynomial":
        return c1 * k.pow(gamma)
    if decay == "exponential":
        return c1 * torch.exp(-c2 * k.pow(gamma))
    raise ValueError(f"decay {decay!r} unknown; choose one of: {', '.join(DECAYS)}")


def spectrum_penalty(matrix: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """``sum_k (sigma_k - target_k)^2`` over the singular values of ``matrix`` (n x d, n >= d); (penalty, sigma)."""
    import torch

    with torch.autocast(device_type=matrix.device.type, enabled=False):
        single = matrix.float()
        sigma = torch.linalg.eigvalsh((single.T @ single).to(torch.float64)).flip(0).clamp_min(1e-12).sqrt()
        penalty = (sigma - targets.to(sigma)).square().sum()
    return penalty.float(), sigma.detach()


@CRITERIONS.register("spectrum", SpectrumConfig)
class SpectrumCriterion(CrossEntropyCriterion):
    """Task loss plus ``lam * sum_k (sigma_k - target_k)^2`` over the word-embedding matrix's singular values."""

    @classmethod
    def check_setup(cls, cfg: SpectrumConfig, adapter: type, kind: str) -> None:
        if not callable(getattr(adapter, "word_embeddings", None)):
            raise ValueError(f"criterion=spectrum needs a model adapter with a word-embedding matrix "
                             f"(word_embeddings()); {adapter.__name__} has none")

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        base = task_loss(self.kind, output, batch)
        matrix = model.word_embeddings()
        cfg = self.cfg
        targets = spectrum_targets(cfg.decay, min(matrix.shape), cfg.c1, cfg.c2, cfg.gamma)
        penalty, sigma = spectrum_penalty(matrix, targets)
        stats = {"task_loss": base.detach(), "penalty": (cfg.lam * penalty).detach(),
                 "sigma_max": sigma[0].float(), "sigma_min": sigma[-1].float()}
        return CriterionOutput(base + cfg.lam * penalty, stats)
