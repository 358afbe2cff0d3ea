"""The seed papers' other measures of a point cloud (average cosine, partition-function isotropy, explained variance,
TwoNN dimension) and of sentence embeddings (alignment, uniformity, RankMe).

>>> round(average_cosine_similarity(torch.eye(3)).item(), 3)  # orthogonal points
0.0
"""
from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from .covariance import _check_points, _compute_dtype

def average_cosine_similarity(points: Tensor) -> Tensor:
    """Mean cosine similarity over ordered pairs i != j, in O(n d); a zero row counts as cosine 0 with every point."""
    _check_points(points)
    units = torch.nn.functional.normalize(points.to(_compute_dtype(points)), dim=1)
    return cosine_from_unit_sums(units.sum(dim=0), units.square().sum(), points.shape[0])  # which refuses n < 2


def cosine_from_unit_sums(unit_sum: Tensor, unit_square_sum: Tensor | float, n: int) -> Tensor:
    """:func:`average_cosine_similarity` of ``n`` points from the sums of their unit vectors and squared norms."""
    if n < 2:
        raise ValueError(f"average cosine similarity needs at least 2 points, got {n}")
    return (unit_sum.square().sum() - unit_square_sum) / (n * (n - 1))


def partition_isotropy(points: Tensor) -> tuple[Tensor, Tensor]:
    """Partition-function isotropy ``(I1, I2)`` (Mu et al. 2017): ``I1 = min Z / max Z``, ``I2 = std(Z) / mean(Z)``
    of ``Z(c) = sum_i exp(c . x_i)`` over the eigenvectors ``c`` of ``X^T X`` with both signs; isotropic: (1, 0)."""
    _check_points(points)
    x = points.detach().to(torch.float64)
    directions = torch.linalg.eigh(x.T @ x).eigenvectors
    directions = torch.cat([directions, -directions], dim=1)
    log_z = torch.logsumexp(x @ directions, dim=0)
    relative = torch.exp(log_z - log_z.max())
    i1 = relative.min()
    i2 = relative.std(unbiased=False) / relative.mean()
    return i1, i2


def explained_variance_ratio(points: Tensor, k: int) -> Tensor:
    """EV_k: share of the total variance along the top ``k`` principal components."""
    _check_points(points)
    if points.shape[0] < 2:
        raise ValueError(f"explained variance needs at least 2 points, got {points.shape[0]}")
    return explained_variance_curve(torch.cov(points.detach().to(torch.float64).T), k)[k - 1]


def explained_variance_curve(cov: Tensor, k_max: int) -> Tensor:
    """``[EV_1, ..., EV_k_max]`` of the points whose covariance is ``cov`` (d, d), e.g. a streamed one."""
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"cov must be a square (d, d) matrix, got shape {tuple(cov.shape)}")
    if not 1 <= k_max <= cov.shape[0]:
        raise ValueError(f"k must lie in [1, {cov.shape[0]}] (the dimension), got {k_max}")
    eigenvalues = torch.linalg.eigvalsh(cov.to(torch.float64)).clamp_min(0).flip(0)
    if eigenvalues.sum() == 0:
        raise ValueError("explained variance is undefined: all points are identical (zero variance)")
    return eigenvalues[:k_max].cumsum(0) / eigenvalues.sum()


@torch.no_grad()
def twonn_dimension(points: Tensor, discard_fraction: float = 0.1, chunk_size: int = 1024) -> Tensor:
    """TwoNN intrinsic dimension (Facco et al. 2017): the slope of ``-log(1 - F(mu))`` over ``log(mu)``, with
    ``mu = r2 / r1`` of each point's two nearest neighbours, less the largest ``discard_fraction`` and duplicates."""
    _check_points(points, "points")
    if not 0.0 <= discard_fraction < 1.0:
        raise ValueError(f"discard_fraction must lie in [0, 1), got {discard_fraction}")
    x = points.to(torch.float64)
    x = x - x.mean(dim=0)  # distances by |x|^2 + |y|^2 - 2 x.y lose precision far from the origin
    n = x.shape[0]
    if n < 3:
        raise ValueError(f"TwoNN needs at least 3 points, got {n}")
    nearest = [block.topk(2, dim=1, largest=False).values.clamp_min(0).sqrt() for block in _distances(x, chunk_size)]
    r1, r2 = torch.cat(nearest).T
    keep = r1 > 0
    mu = (r2[keep] / r1[keep]).sort().values
    m = mu.shape[0]
    if m < 3:
        raise ValueError(f"TwoNN needs at least 3 distinct points, got {m}")
    used = min(m - 1, max(2, int(m * (1 - discard_fraction))))  # F = m / m = 1 would give log(0)
    log_mu = mu[:used].log()
    empirical_cdf = torch.arange(1, used + 1, dtype=torch.float64, device=x.device) / m
    target = -torch.log1p(-empirical_cdf)
    return (log_mu * target).sum() / log_mu.square().sum()


def alignment(first: Tensor, second: Tensor, alpha: float = 2.0) -> Tensor:
    """Alignment (Wang & Isola 2020): mean ``||f(x) - f(y)||^alpha`` over positive pairs, rows of ``first`` and
    ``second`` paired, after L2 normalisation; 0 when every pair coincides, 4 (alpha 2) for opposite pairs."""
    _check_points(first, "first")
    if first.shape != second.shape:
        raise ValueError(f"alignment pairs rows: first has shape {tuple(first.shape)}, second {tuple(second.shape)}")
    if alpha <= 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    dtype = _compute_dtype(first)
    difference = (torch.nn.functional.normalize(first.to(dtype), dim=1)
                  - torch.nn.functional.normalize(second.to(dtype), dim=1))
    return difference.norm(dim=1).pow(alpha).mean()


def uniformity(points: Tensor, t: float = 2.0, chunk_size: int = 1024) -> Tensor:
    """Uniformity (Wang & Isola 2020): ``log mean exp(-t ||u_i - u_j||^2)`` over pairs i < j of the L2-normalised
    rows; lower is more uniform on the sphere, 0 when all rows share one direction."""
    _check_points(points)
    n = points.shape[0]
    if n < 2:
        raise ValueError(f"uniformity needs at least 2 points, got {n}")
    if t <= 0:
        raise ValueError(f"t must be positive, got {t}")
    units = torch.nn.functional.normalize(points.to(_compute_dtype(points)), dim=1)
    total = sum(torch.exp(-t * block.clamp_min(0)).sum() for block in _distances(units, chunk_size))  # pairs twice
    return torch.log(total / (n * (n - 1)))


def _distances(x: Tensor, chunk_size: int) -> Iterator[Tensor]:
    """Squared distances ``|x_i|^2 + |x_j|^2 - 2 x_i . x_j`` of each block of rows to every row, infinite to itself."""
    squares = x.square().sum(dim=1)
    for start in range(0, x.shape[0], chunk_size):
        block = squares[start : start + chunk_size, None] + squares[None, :] - 2 * x[start : start + chunk_size] @ x.T
        rows = torch.arange(block.shape[0], device=x.device)
        block[rows, rows + start] = float("inf")
        yield block


def rankme(points: Tensor, eps: float = 1e-7) -> Tensor:
    """RankMe (Garrido et al. 2023): the effective rank ``exp(H(p))`` of the embedding matrix, ``p_k = s_k / ||s||_1
    + eps`` for its singular values ``s`` (uncentred as in the paper, via the smaller Gram); in [1, min(n, d)]."""
    _check_points(points)
    x = points.detach().to(torch.float64)
    gram = x.T @ x if x.shape[0] >= x.shape[1] else x @ x.T
    singular = torch.linalg.eigvalsh(gram).clamp_min(0).sqrt()
    if singular.sum() == 0:
        raise ValueError("RankMe is undefined for an all-zero embedding matrix")
    p = singular / singular.sum() + eps
    return torch.exp(-(p * p.log()).sum())
