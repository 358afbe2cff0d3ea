"""One optimizer step over a group of micro-batches (gradients synchronised on the last one only), and the statistics
of a logging interval's steps, kept where they live until the interval is logged."""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, ContextManager, Optional

import torch

from .distributed import mean_over_ranks


class OptimizerStep:
    """One step over its micro-batches; returns ``loss``, the criterion's ``stats``, ``grad_norm`` and ``lr``."""

    def __init__(self, model: torch.nn.Module, wrapped: torch.nn.Module, criterion, optimizer, scheduler, scaler, guard,
                 autocast: Callable[[], ContextManager], device: torch.device, world_size: int, max_grad_norm: float):
        self.model, self.wrapped, self.criterion = model, wrapped, criterion
        self.optimizer, self.scheduler, self.scaler, self.guard = optimizer, scheduler, scaler, guard
        self.autocast, self.device, self.world_size, self.max_grad_norm = autocast, device, world_size, max_grad_norm

    def __call__(self, group: list[dict[str, torch.Tensor]], step: int) -> dict[str, Any]:
        totals: dict[str, Any] = {}
        norm = None
        for index, batch in enumerate(group):
            sync = index == len(group) - 1 or self.world_size == 1
            with contextlib.nullcontext() if sync else self.wrapped.no_sync():
                with self.autocast():
                    output = self.wrapped(batch)
                result = self.criterion(self.model, output, batch)
                self.scaler.scale(result.loss / len(group)).backward()
            for name, value in {"loss": result.loss.detach(), **result.stats}.items():
                totals[name] = totals.get(name, 0.0) + torch.as_tensor(value, device=self.device) / len(group)
        if self.max_grad_norm > 0:
            self.scaler.unscale_(self.optimizer)
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
            totals["grad_norm"] = norm.detach()
        self.guard.observe(step, totals["loss"], norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        totals["lr"] = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        return totals


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
