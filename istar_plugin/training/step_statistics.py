"""The statistics of one logging interval, kept where they live until the interval is logged."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch

from .distributed import mean_over_ranks


class IntervalStatistics:
    """The per-step statistics of one logging interval, summed where they live; :meth:`means` reads them at once."""

    def __init__(self):
        self.sums: dict[str, Any] = {}
        self.steps = 0
        self.started = time.perf_counter()

    def add(self, stats: dict[str, Any]) -> None:
        for name, value in stats.items():
            self.sums[name] = self.sums.get(name, 0.0) + value
        self.steps += 1

    def means(self, world_size: int,
              read: Optional[Callable[[Optional[torch.Tensor]], list[float]]] = None) -> dict[str, float]:
        """Means over the interval's steps (device ones also over the ranks); ``read`` brings device means to host."""
        on_device = sorted(name for name, value in self.sums.items() if isinstance(value, torch.Tensor))
        means = {name: value / self.steps for name, value in self.sums.items() if name not in on_device}
        totals = None
        if on_device:
            totals = torch.stack([self.sums[name].to(torch.float64) for name in on_device]) / self.steps
            totals = mean_over_ranks(totals, world_size)
        values = read(totals) if read is not None else ([] if totals is None else totals.tolist())
        means.update(zip(on_device, values))
        return means
