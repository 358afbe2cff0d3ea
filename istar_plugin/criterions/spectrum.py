"""Spectrum control (Wang et al. 2019, as compared by Ding et al.): pull the singular values of the
word-embedding matrix W towards a decaying target, ``lam * sum_k (sigma_k - target_k)^2``.

Targets: ``polynomial`` ``c1 * k^gamma`` (decays for gamma < 0), ``exponential`` ``c1 * exp(-c2 * k^gamma)``
(decays for c2 > 0 and gamma > 0); k = 1..d counts the singular values from the largest.

Formulation: differentiable singular values taken each step from the d x d Gram matrix,
``sigma_k = sqrt(eigvalsh(W^T W))`` (the product in float32, O(|V| d^2); the eigenvalues in float64, O(d^3);
the eigenvalues' gradient ``v_k v_k^T`` needs no eigenvalue gaps, so repeated values are harmless). Wang
et al.'s own scheme re-parameterises W as ``U diag(sigma) V^T`` with U, V kept orthogonal; that replaces
the pretrained parameter by three, adds an orthogonality penalty of the same O(|V| d^2) cost, and changes
what the optimizer updates. ``benchmarks/spectrum_formulation.py`` measures both on MiniLM's W (forward +
backward time, agreement with ``torch.linalg.svdvals``).

>>> import torch
>>> spectrum_targets("polynomial", 3, c1=2.0, c2=0.0, gamma=-1.0).tolist()
[2.0, 1.0, 0.6666666666666666]
>>> w = torch.diag(torch.tensor([3.0, 1.0])).requires_grad_()
>>> penalty, sigma = spectrum_penalty(w, torch.tensor([1.0, 1.0]))
>>> round(penalty.item(), 4), [round(s, 4) for s in sigma.tolist()]  # (3 - 1)^2 + 0
(4.0, [3.0, 1.0])
"""
from __future__ import annotations


import torch
from torch import Tensor

from ..registry import CRITERIONS
from .configs import DECAYS, SpectrumConfig, SpectrumSetup
from .task import CriterionOutput, CrossEntropyCriterion, task_loss



def spectrum_targets(decay: str, count: int, c1: float, c2: float, gamma: float) -> Tensor:
    """The target singular values ``target_k``, k = 1..count (float64)."""
    k = torch.arange(1, count + 1, dtype=torch.float64)
    if decay == "polynomial":
        return c1 * k.pow(gamma)
    if decay == "exponential":
        return c1 * torch.exp(-c2 * k.pow(gamma))
    raise ValueError(f"decay {decay!r} unknown; choose one of: {', '.join(DECAYS)}")


def singular_values(matrix: Tensor) -> Tensor:
    """Singular values of ``matrix`` (n x d, n >= d), largest first, differentiable: sqrt of the eigenvalues
    (float64) of the Gram matrix (float32)."""
    single = matrix.float()
    gram = (single.T @ single).to(torch.float64)
    return torch.linalg.eigvalsh(gram).flip(0).clamp_min(1e-12).sqrt()


def spectrum_penalty(matrix: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """``sum_k (sigma_k - target_k)^2`` over the singular values of ``matrix``; returns (penalty, sigma)."""
    with torch.autocast(device_type=matrix.device.type, enabled=False):
        sigma = singular_values(matrix)
        penalty = (sigma - targets.to(sigma)).square().sum()
    return penalty.float(), sigma.detach()


@CRITERIONS.register("spectrum", SpectrumConfig)
class SpectrumCriterion(SpectrumSetup, CrossEntropyCriterion):
    """Task loss plus ``lam * sum_k (sigma_k - target_k)^2`` over the word-embedding matrix's singular values.

    Logs the penalty and the largest and smallest singular value.
    """

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        base = task_loss(self.kind, output, batch)
        matrix = model.word_embeddings()
        cfg = self.cfg
        targets = spectrum_targets(cfg.decay, min(matrix.shape), cfg.c1, cfg.c2, cfg.gamma)
        penalty, sigma = spectrum_penalty(matrix, targets)
        loss = base + cfg.lam * penalty
        stats = {"task_loss": base.detach(), "penalty": (cfg.lam * penalty).detach(),
                 "sigma_max": sigma[0].float(), "sigma_min": sigma[-1].float()}
        return CriterionOutput(loss, stats)
