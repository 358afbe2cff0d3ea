"""IsoScore and the differentiable IsoScore* of a point cloud, alone, pooled over ranks, or streamed
(:class:`CovarianceAccumulator`); docs/architecture.md derives their reduction to a participation ratio.

>>> round(isoscore(torch.eye(3, dtype=torch.float64)).item(), 2)  # three points, two used directions around their mean
0.5
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

def _compute_dtype(points: Tensor) -> torch.dtype:
    """float64 stays float64; everything else (half, bfloat16, float32, integers) is computed in float32."""
    return torch.float64 if points.dtype == torch.float64 else torch.float32


def _check_points(points: Tensor, name: str = "points") -> None:
    if points.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d) with points as rows, got shape {tuple(points.shape)}")
    if points.shape[1] < 2:
        raise ValueError(f"isotropy needs at least 2 dimensions, got d = {points.shape[1]}")


def _score_from_moments(trace: Tensor, frobenius_sq: Tensor, dim: int) -> Tensor:
    """``(r**2 - 1) / (d - 1)`` with ``r**2 = trace**2 / ||S||_F**2``; 0 for the zero matrix, NaN if not finite."""
    nonzero = frobenius_sq > 0
    safe = torch.where(nonzero, frobenius_sq, torch.ones_like(frobenius_sq))
    ratio_sq = trace.square() / safe
    score = torch.where(nonzero, (ratio_sq - 1.0) / (dim - 1), torch.zeros_like(ratio_sq))
    finite = torch.isfinite(trace) & torch.isfinite(frobenius_sq)
    return torch.where(finite, score, torch.full_like(score, float("nan")))


def _scatter(chunks: Sequence[Tensor]) -> Tensor:
    """``sum_k Xk^T Xk`` over the chunks, never concatenated."""
    product = chunks[0].T @ chunks[0]
    for chunk in chunks[1:]:
        product.addmm_(chunk.T, chunk)
    return product


class _CovarianceMoments(torch.autograd.Function):
    """``[trace(C), ||C||_F**2, <C, A>]`` of the covariance ``C`` of the union of ``chunks``, one product each way."""

    @staticmethod
    def forward(ctx, other: Optional[Tensor], *chunks: Tensor) -> Tensor:  # type: ignore[override]
        n = sum(chunk.shape[0] for chunk in chunks)
        mean = sum(chunk.sum(dim=0) for chunk in chunks) / n
        centred = [chunk - mean for chunk in chunks]
        use_gram = other is None and len(centred) == 1 and n < centred[0].shape[1]
        product = centred[0] @ centred[0].T if use_gram else _scatter(centred)
        product /= n - 1
        trace = product.diagonal().sum()
        frobenius_sq = product.square().sum()
        cross = (product * other).sum() if other is not None else torch.zeros_like(trace)
        ctx.save_for_backward(product, other, *centred)
        ctx.use_gram, ctx.n = use_gram, n
        return torch.stack([trace, frobenius_sq, cross])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        product, other, *centred = ctx.saved_tensors
        scale = 2.0 / (ctx.n - 1)
        if ctx.use_gram:  # d||K||^2/dX = 4 K X / (n-1) with K = X X^T / (n-1); dtrace/dX = 2 X / (n-1)
            (chunk,) = centred
            return None, (scale * grad[0]) * chunk + (2.0 * scale * grad[1]) * (product @ chunk)
        grad_cov = (2.0 * scale * grad[1]) * product  # the scale lives in the d x d matrix, not the n x d grads
        if other is not None:
            grad_cov = grad_cov + (0.5 * scale * grad[2]) * (other + other.T)
        grad_cov.diagonal().add_(scale * grad[0])
        grad_other = grad[2] * product if ctx.needs_input_grad[0] else None  # d<C, A>/dA = C
        return (grad_other, *(chunk @ grad_cov for chunk in centred))


def isoscore_star(points: Tensor | Sequence[Tensor], shrinkage_cov: Optional[Tensor] = None, zeta: float = 0.0,
                  mask: Optional[Tensor] = None) -> Tensor:
    """IsoScore* (Algorithm 1): isotropy in [0, 1] of ``(1 - zeta) * cov(points) + zeta * shrinkage_cov``.

    ``points``: (n, d) rows, or a sequence of (n_k, d) chunks whose union is the cloud (never concatenated);
    ``mask`` (n,) boolean keeps rows of a single tensor. Computed in at least float32; differentiable in ``points``.

    >>> x = torch.randn(64, 16, requires_grad=True)
    >>> score = isoscore_star(x, torch.eye(16), zeta=0.5)
    >>> score.backward(); bool(0 <= score <= 1) and x.grad.shape == x.shape
    True
    """
    chunks = _as_chunks(points, mask, shrinkage_cov, zeta)
    dim = chunks[0].shape[1]
    dtype, device = _compute_dtype(chunks[0]), chunks[0].device
    with torch.autocast(device_type=device.type, enabled=False):
        shrink = None if shrinkage_cov is None else shrinkage_cov.to(device=device, dtype=dtype)
        if zeta == 1.0:
            return isoscore_from_cov(shrink)
        n = sum(chunk.shape[0] for chunk in chunks)
        if n < 2:
            raise ValueError(f"IsoScore* with zeta = {zeta} < 1 needs at least 2 points, got {n}")
        use_other = shrink is not None and zeta > 0
        chunks = [chunk.to(dtype) for chunk in chunks]
        trace_c, frob_c, cross = _CovarianceMoments.apply(shrink if use_other else None, *chunks)
        if not use_other:
            return _score_from_moments(trace_c, frob_c, dim)
        trace = (1 - zeta) * trace_c + zeta * torch.trace(shrink)
        frobenius_sq = (1 - zeta) ** 2 * frob_c + 2 * zeta * (1 - zeta) * cross + zeta**2 * shrink.square().sum()
        return _score_from_moments(trace, frobenius_sq, dim)


def _as_chunks(points: Tensor | Sequence[Tensor], mask: Optional[Tensor], shrinkage_cov: Optional[Tensor],
               zeta: float) -> list[Tensor]:
    """Validate the cloud and its shrinkage and return the cloud as a list of (n_k, d) tensors, mask applied."""
    if isinstance(points, Tensor):
        _check_points(points)
        if mask is not None:
            if mask.dtype != torch.bool or tuple(mask.shape) != (points.shape[0],):
                raise ValueError(f"mask must be a boolean tensor of shape ({points.shape[0]},), "
                                 f"got {mask.dtype} {tuple(mask.shape)}")
            points = points[mask]
        chunks = [points]
    elif mask is not None:
        raise ValueError("mask applies to a single (n, d) tensor; mask each chunk of a sequence yourself")
    elif not (chunks := list(points)):
        raise ValueError("points is an empty sequence of chunks")
    for chunk in chunks:
        _check_points(chunk, "every chunk of points")
    if len(dims := {chunk.shape[1] for chunk in chunks}) > 1:
        raise ValueError(f"chunks of points must share one dimension, got dimensions {sorted(dims)}")
    dim = chunks[0].shape[1]
    if not 0.0 <= float(zeta) <= 1.0:
        raise ValueError(f"zeta must lie in [0, 1] (0: no shrinkage, 1: shrinkage_cov alone), got {zeta}")
    if zeta > 0 and shrinkage_cov is None:
        raise ValueError(f"zeta = {zeta} > 0 needs a shrinkage_cov of shape ({dim}, {dim})")
    if shrinkage_cov is not None and tuple(shrinkage_cov.shape) != (dim, dim):
        raise ValueError(f"shrinkage_cov has shape {tuple(shrinkage_cov.shape)}, expected ({dim}, {dim}) "
                         f"to match points of dimension {dim}")
    return chunks


class _PooledScatter(torch.autograd.Function):
    """Sum over ranks of ``sum_k Xk^T Xk``, identical on every rank; the backward all-reduces the gradient."""

    @staticmethod
    def forward(ctx, group, *chunks: Tensor) -> Tensor:  # type: ignore[override]
        import torch.distributed as dist

        scatter = _scatter(chunks)
        dist.all_reduce(scatter, group=group)
        ctx.group = group
        ctx.save_for_backward(*chunks)
        return scatter

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        import torch.distributed as dist

        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        symmetric = grad + grad.T
        return (None, *(chunk @ symmetric for chunk in ctx.saved_tensors))


def pooled_isoscore_star(points: Tensor | Sequence[Tensor], shrinkage_cov: Optional[Tensor] = None, zeta: float = 0.0,
                         group=None) -> Tensor:
    """IsoScore* of the union of every torch.distributed rank's points, the same value on every rank."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return isoscore_star(points, shrinkage_cov, zeta)
    chunks = _as_chunks(points, None, shrinkage_cov, zeta)
    dim = chunks[0].shape[1]
    dtype, device = _compute_dtype(chunks[0]), chunks[0].device
    with torch.autocast(device_type=device.type, enabled=False):
        chunks = [chunk.to(dtype) for chunk in chunks]
        totals = torch.cat([sum(chunk.detach().sum(dim=0) for chunk in chunks),
                            chunks[0].new_tensor([sum(c.shape[0] for c in chunks)])])
        dist.all_reduce(totals, group=group)
        count = totals[-1]
        if count < 2:
            raise ValueError(f"pooled IsoScore* needs at least 2 points over all ranks, got {int(count)}")
        mean = totals[:-1] / count  # no gradient needed: the centred points sum to zero over the union
        cov = _PooledScatter.apply(group, *(chunk - mean for chunk in chunks)) / (count - 1)
        if zeta > 0:
            cov = (1 - zeta) * cov + zeta * shrinkage_cov.to(device=device, dtype=dtype)
        return _score_from_moments(torch.trace(cov), cov.square().sum(), dim)


def isoscore(points: Tensor) -> Tensor:
    """Vanilla IsoScore (Algorithm 2): IsoScore* without shrinkage, in float64 for analysis.

    >>> round(isoscore(torch.randn(5000, 4, dtype=torch.float64)).item(), 1)
    1.0
    """
    return isoscore_star(torch.as_tensor(points).detach().to(torch.float64))


def isoscore_from_cov(cov: Tensor) -> Tensor:
    """IsoScore of a covariance matrix (e.g. a known Gaussian's, or Sigma_S).

    >>> isoscore_from_cov(torch.diag(torch.tensor([2., 2., 0., 0.]))).item()  # 2 of 4 directions: (2-1)/(4-1)
    0.3333333432674408
    """
    cov = torch.as_tensor(cov)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"cov must be a square (d, d) matrix, got shape {tuple(cov.shape)}")
    if cov.shape[0] < 2:
        raise ValueError(f"isotropy needs at least 2 dimensions, got d = {cov.shape[0]}")
    cov = cov.to(_compute_dtype(cov))
    return _score_from_moments(torch.trace(cov), cov.square().sum(), cov.shape[0])


class CovarianceAccumulator:
    """Streaming covariance in O(d^2) memory: count, mean and centred scatter, merged with Chan et al.'s update.

    >>> acc = CovarianceAccumulator(3)
    >>> x = torch.randn(100, 3, dtype=torch.float64)
    >>> acc.update(x[:30]); acc.update(x[30:])
    >>> torch.allclose(acc.covariance(), torch.cov(x.T))
    True
    """

    def __init__(self, dim: int, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None):
        self.dim = dim
        self.count = 0
        self.mean = torch.zeros(dim, dtype=dtype, device=device)
        self.scatter = torch.zeros(dim, dim, dtype=dtype, device=device)

    @torch.no_grad()
    def update(self, points: Tensor, mask: Optional[Tensor] = None) -> None:
        """Add the rows of ``points`` (n, d) (those where ``mask`` is True)."""
        _check_points(points)
        if points.shape[1] != self.dim:
            raise ValueError(f"points have dimension {points.shape[1]}, accumulator has {self.dim}")
        if mask is not None:
            points = points[mask.to(torch.bool)]
        if points.shape[0] == 0:
            return
        # outside autocast: under bf16 autocast the scatter product would be off by about 1e-2
        x = points.to(device=self.mean.device, dtype=_compute_dtype(points))
        with torch.autocast(device_type=x.device.type, enabled=False):
            mean = x.mean(dim=0)
            centred = x - mean
            self._merge_moments(x.shape[0], mean.to(self.mean.dtype), (centred.T @ centred).to(self.scatter.dtype))

    def _merge_moments(self, count: int, mean: Tensor, scatter: Tensor) -> None:
        total = self.count + count
        delta = mean - self.mean
        self.scatter += scatter + torch.outer(delta, delta) * (self.count * count / total)
        self.mean += delta * (count / total)
        self.count = total

    def merge(self, other: "CovarianceAccumulator") -> "CovarianceAccumulator":
        """Pool ``other``'s points into this accumulator (in place; returns self)."""
        if other.dim != self.dim:
            raise ValueError(f"cannot merge accumulators of dimensions {self.dim} and {other.dim}")
        if other.count:
            self._merge_moments(other.count, other.mean.to(self.mean), other.scatter.to(self.scatter))
        return self

    def covariance(self) -> Tensor:
        """Unbiased covariance (divides by count - 1) of every point seen."""
        if self.count < 2:
            raise ValueError(f"covariance needs at least 2 points, the accumulator has {self.count}")
        return self.scatter / (self.count - 1)

    @torch.no_grad()
    def all_reduce(self, group=None) -> "CovarianceAccumulator":
        """Pool across torch.distributed ranks in place: every rank ends with bitwise the statistics of the union."""
        import torch.distributed as dist

        totals = torch.cat([self.mean.new_tensor([float(self.count)]), self.mean * self.count])
        dist.all_reduce(totals, group=group)
        count = int(round(totals[0].item()))
        if count == 0:
            return self
        global_mean = totals[1:] / count
        delta = self.mean - global_mean
        scatter = self.scatter + torch.outer(delta, delta) * self.count
        dist.all_reduce(scatter, group=group)
        source = dist.get_global_rank(group, 0) if group is not None else 0
        dist.broadcast(global_mean, src=source, group=group)
        dist.broadcast(scatter, src=source, group=group)
        self.count, self.mean, self.scatter = count, global_mean, scatter
        return self

    def state_dict(self) -> dict:
        return {"dim": self.dim, "count": self.count, "mean": self.mean.clone(), "scatter": self.scatter.clone()}

    def load_state_dict(self, state: dict) -> None:
        if state["dim"] != self.dim:
            raise ValueError(f"state has dimension {state['dim']}, accumulator has {self.dim}")
        self.count = int(state["count"])
        self.mean = state["mean"].to(self.mean, copy=True)
        self.scatter = state["scatter"].to(self.scatter, copy=True)


def score_text(value: float) -> str:
    """An IsoScore for a log line: four decimals, or scientific notation below a thousandth.

    >>> score_text(0.58812), score_text(2.34e-05), score_text(0.0)
    ('0.5881', '2.34e-05', '0.0000')
    """
    return f"{value:.2e}" if 0 < abs(value) < 1e-3 else f"{value:.4f}"

