"""The torch pieces the criterions build on, imported when first used: Glow, EmbeddingCosine and BalanceState."""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from ..hooks import Hook


def standard_normal_nll(x: Tensor) -> Tensor:
    """Per-row negative log-density of x under N(0, I), in nats."""
    return 0.5 * (x.square().sum(dim=-1) + x.shape[-1] * math.log(2 * math.pi))


class ActNorm(nn.Module):
    """``y = (x + bias) * exp(log_scale)`` per dimension; identity at initialisation."""

    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return (x + self.bias) * self.log_scale.exp(), self.log_scale.sum().expand(x.shape[0])

    def inverse(self, y: Tensor) -> Tensor:
        return y * (-self.log_scale).exp() - self.bias


class LULinear(nn.Module):
    """``y = x W^T`` with ``W = L (U + diag(sign * exp(log_s)))``, L unit lower and U strictly upper triangular."""

    def __init__(self, dim: int):
        super().__init__()
        self.lower = nn.Parameter(torch.zeros(dim, dim))
        self.upper = nn.Parameter(torch.zeros(dim, dim))
        self.log_s = nn.Parameter(torch.zeros(dim))
        self.register_buffer("sign", torch.ones(dim))
        self.register_buffer("lower_mask", torch.tril(torch.ones(dim, dim), -1))

    def weight(self) -> Tensor:
        eye = torch.eye(self.log_s.shape[0], dtype=self.log_s.dtype, device=self.log_s.device)
        lower = self.lower * self.lower_mask + eye
        upper = self.upper * self.lower_mask.T + torch.diag(self.sign * self.log_s.exp())
        return lower @ upper

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return x @ self.weight().T, self.log_s.sum().expand(x.shape[0])

    def inverse(self, y: Tensor) -> Tensor:
        return torch.linalg.solve(self.weight(), y.T).T


class AffineCoupling(nn.Module):
    """``y_b = x_b * exp(tanh(s(x_a))) + t(x_a)``: one half of x passes unchanged and conditions the other."""

    def __init__(self, dim: int, width: int, flip: bool):
        super().__init__()
        self.flip = flip
        self.kept = dim // 2 if not flip else dim - dim // 2
        changed = dim - self.kept
        self.net = nn.Sequential(nn.Linear(self.kept, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, 2 * changed))
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def _halves(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(kept half, changed half, log scale, shift)."""
        if self.flip:
            changed, kept = x.split([x.shape[1] - self.kept, self.kept], dim=1)
        else:
            kept, changed = x.split([self.kept, x.shape[1] - self.kept], dim=1)
        raw_scale, shift = self.net(kept).chunk(2, dim=1)
        return kept, changed, torch.tanh(raw_scale), shift

    def _join(self, kept: Tensor, changed: Tensor) -> Tensor:
        return torch.cat([changed, kept] if self.flip else [kept, changed], dim=1)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        kept, changed, log_scale, shift = self._halves(x)
        return self._join(kept, changed * log_scale.exp() + shift), log_scale.sum(dim=1)

    def inverse(self, y: Tensor) -> Tensor:
        kept, changed, log_scale, shift = self._halves(y)
        return self._join(kept, (changed - shift) * (-log_scale).exp())


class Glow(nn.Module):
    """``depth`` steps of (actnorm, LU linear, affine coupling); ``encode(h)`` is ``(z, log|det dz/dh|)``."""

    def __init__(self, dim: int, depth: int = 2, width: int = 256):
        super().__init__()
        if dim < 2:
            raise ValueError(f"a coupling flow needs at least 2 dimensions to split, got {dim}")
        self.steps = nn.ModuleList(
            nn.ModuleList([ActNorm(dim), LULinear(dim), AffineCoupling(dim, width, flip=bool(i % 2))])
            for i in range(depth)
        )

    def encode(self, h: Tensor) -> tuple[Tensor, Tensor]:
        x, logdet = h, h.new_zeros(h.shape[0])
        for step in self.steps:
            for layer in step:
                x, part = layer(x)
                logdet = logdet + part
        return x, logdet

    def decode(self, z: Tensor) -> Tensor:
        x = z
        for step in reversed(self.steps):
            for layer in reversed(step):
                x = layer.inverse(x)
        return x

    def forward(self, h: Tensor) -> Tensor:
        return self.encode(h)[0]

    def nll(self, h: Tensor) -> Tensor:
        """Per-row ``-log p(h) = -log N(f^-1(h); 0, I) - log|det d f^-1 / dh|``, in nats."""
        z, logdet = self.encode(h)
        return standard_normal_nll(z) - logdet


class EmbeddingCosine(torch.autograd.Function):
    """``(||s||^2 - #nonzero rows) / n^2`` with ``s = sum_i w_i / ||w_i||``, its gradient in one pass."""

    @staticmethod
    def forward(ctx, matrix: Tensor) -> Tensor:
        norms = torch.linalg.vector_norm(matrix, dim=1)
        inverse = torch.where(norms > 0, 1.0 / norms.clamp_min(torch.finfo(matrix.dtype).tiny), torch.zeros_like(norms))
        total = matrix.T @ inverse  # sum of the unit rows, without forming them
        rows = matrix.shape[0]
        ctx.save_for_backward(matrix, inverse, total)
        return (total.dot(total) - (norms > 0).sum()) / rows**2

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> Tensor:
        matrix, inverse, total = ctx.saved_tensors
        scale = 2.0 * grad_output / matrix.shape[0] ** 2
        projections = matrix @ total  # w_i . s
        grad = matrix * (-scale * projections * inverse.pow(3)).unsqueeze(1)
        return grad.addr_(inverse, total, alpha=float(scale))


class BalanceState(Hook):
    """Saves the running means and k with every checkpoint; restarts k at each epoch if configured."""

    def __init__(self, criterion):
        self.criterion = criterion

    def on_epoch_start(self, run, epoch: int) -> None:
        if self.criterion.cfg.restart_per_epoch and not run.mid_epoch:
            self.criterion.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"means": self.criterion.means, "step": self.criterion.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.criterion.means, self.criterion.step = state["means"], state["step"]
