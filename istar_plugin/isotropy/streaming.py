"""Streaming statistics of a token cloud given layer by layer, the one accumulation every per-layer pass uses:
:class:`LayerStatistics` holds a covariance accumulator per layer (or one for all, ``pooled``) and their union;
:func:`stream` feeds it each batch's clouds (each already a set of rows) until its quota is met.

>>> stats = LayerStatistics(3, num_layers=2)
>>> clouds = [torch.randn(50, 3, dtype=torch.float64), torch.randn(40, 3, dtype=torch.float64)]
>>> stream(stats, [clouds[:1] + clouds[1:], [c[:10] for c in clouds]], lambda batch: batch).count
110
>>> union = torch.cat([clouds[0], clouds[1], clouds[0][:10], clouds[1][:10]])
>>> torch.allclose(stats.union().covariance(), torch.cov(union.T))
True
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence, TypeVar

import torch
from torch import Tensor

from .covariance import CovarianceAccumulator, isoscore_from_cov

Batch = TypeVar("Batch")


class TokenMoments(CovarianceAccumulator):
    """A covariance accumulator that also sums the unit vectors and their squared norms (the average cosine) and
    keeps per dimension the sum and the maximum of |activation| (outlier dimensions, massive activations).

    >>> moments = TokenMoments(2)
    >>> moments.update(torch.tensor([[3., -4.], [1., 0.]]))
    >>> moments.unit_sum.tolist(), moments.unit_squares.item(), moments.abs_sum.tolist(), moments.abs_max.tolist()
    ([1.6, -0.8], 2.0, [4.0, 4.0], [3.0, 4.0])
    """

    def __init__(self, dim: int, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None):
        super().__init__(dim, dtype, device)
        self.unit_sum = torch.zeros(dim, dtype=dtype, device=device)
        self.unit_squares = torch.zeros((), dtype=dtype, device=device)
        self.abs_sum = torch.zeros(dim, dtype=dtype, device=device)
        self.abs_max = torch.zeros(dim, dtype=dtype, device=device)

    @torch.no_grad()
    def update(self, points: Tensor, mask: Optional[Tensor] = None) -> None:
        super().update(points, mask)
        if mask is not None:
            points = points[mask.to(torch.bool)]
        points = points.to(device=self.mean.device, dtype=self.mean.dtype)
        units = torch.nn.functional.normalize(points, dim=1)
        self.unit_sum += units.sum(dim=0)
        self.unit_squares += units.square().sum()
        magnitudes = points.abs()
        self.abs_sum += magnitudes.sum(dim=0)
        if points.shape[0]:
            self.abs_max = torch.maximum(self.abs_max, magnitudes.amax(dim=0))


def union_of(accumulators: Sequence[CovarianceAccumulator]) -> CovarianceAccumulator:
    """A new accumulator holding every point of ``accumulators`` (the pooled cloud of all layers)."""
    first = accumulators[0]
    union = CovarianceAccumulator(first.dim, dtype=first.mean.dtype, device=first.mean.device)
    for accumulator in accumulators:
        union.merge(accumulator)
    return union


class LayerStatistics:
    """Per-layer statistics of a token cloud streamed batch by batch, in O(layers x d^2) memory.

    The k-th cloud of every update goes into the k-th of ``num_layers`` accumulators (None: one for all, ``pooled``);
    ``dim=None``: the first cloud's; ``quota``: the first this many points in total; ``moments``: :class:`TokenMoments`.

    >>> stats = LayerStatistics(2, quota=3)
    >>> stats.update([torch.ones(2, 2), torch.zeros(5, 2)]), stats.count, stats.full
    (3, 3, True)
    """

    def __init__(self, dim: Optional[int] = None, num_layers: Optional[int] = None, *, quota: Optional[int] = None,
                 moments: bool = False, device: torch.device | str | None = None):
        self.pooled = num_layers is None
        self.size = 1 if self.pooled else num_layers
        self.quota, self.moments, self.device = quota, moments, device
        self.layers: list[CovarianceAccumulator] = [] if dim is None else self._accumulators(dim, device)

    def _accumulators(self, dim: int, device) -> list[CovarianceAccumulator]:
        kind = TokenMoments if self.moments else CovarianceAccumulator
        return [kind(dim, device=device) for _ in range(self.size)]

    @property
    def count(self) -> int:
        """Points taken so far, over every layer."""
        return sum(accumulator.count for accumulator in self.layers)

    @property
    def full(self) -> bool:
        """Whether the quota of points is met (never without a quota)."""
        return self.quota is not None and self.count >= self.quota

    def update(self, clouds: Sequence[Tensor]) -> int:
        """Add one batch's clouds, (n_k, d) each, one per layer (any number if ``pooled``); returns the points taken."""
        if clouds and not self.pooled and len(clouds) != self.size:
            raise ValueError(f"expected one cloud per layer ({self.size}), got {len(clouds)}")
        if not self.layers and clouds:
            self.layers = self._accumulators(clouds[0].shape[1], self.device or clouds[0].device)
        taken = 0
        for index, cloud in enumerate(clouds):
            if self.quota is not None:
                room = self.quota - self.count
                if room <= 0:
                    break
                cloud = cloud[:room]
            self.layers[0 if self.pooled else index].update(cloud)
            taken += cloud.shape[0]
        return taken

    def union(self) -> CovarianceAccumulator:
        """The statistics of every layer's points pooled (the accumulator itself when ``pooled``)."""
        return self.layers[0] if self.pooled else union_of(self.layers)

    def all_reduce(self, group=None) -> "LayerStatistics":
        """Pool every layer's statistics over the torch.distributed ranks (each rank then holds the same)."""
        for accumulator in self.layers:
            accumulator.all_reduce(group)
        return self

    def isoscore_star_per_layer(self) -> list[float]:
        """IsoScore* (zeta 0) of each layer's cloud."""
        return [isoscore_from_cov(accumulator.covariance()).item() for accumulator in self.layers]

    def isoscore_star(self) -> float:
        """IsoScore* (zeta 0) of the layers' pooled cloud."""
        return isoscore_from_cov(self.union().covariance()).item()


@torch.no_grad()
def stream(statistics: LayerStatistics, batches: Iterable[Batch], clouds: Callable[[Batch], Sequence[Tensor]],
           progress: Optional[Callable[[int], object]] = None) -> LayerStatistics:
    """Feed each batch's ``clouds(batch)`` into ``statistics`` until its quota is met, with ``progress(points)``."""
    if statistics.full:
        return statistics
    for batch in batches:
        taken = statistics.update(clouds(batch))
        if progress is not None:
            progress(taken)
        if statistics.full:  # before the next batch is made
            break
    return statistics
