"""One optimizer step over a group of micro-batches: forward under autocast, the loss scaled for accumulation
(gradients synchronised on the last micro-batch only), clipping, the divergence guard, the schedule's move.

>>> import torch
>>> from types import SimpleNamespace
>>> from istar_plugin.training.divergence_guard import NonFiniteGuard
>>> model = torch.nn.Linear(2, 1)
>>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
>>> step = OptimizerStep(model, model, lambda m, out, batch: SimpleNamespace(loss=out.pow(2).mean(), stats={}),
...                      optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0),
...                      torch.amp.GradScaler("cpu", enabled=False), NonFiniteGuard(torch.device("cpu")),
...                      contextlib.nullcontext, torch.device("cpu"), 1, 1.0)
>>> sorted(step([torch.ones(4, 2)], step=1))
['grad_norm', 'loss', 'lr']
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

import torch


class OptimizerStep:
    """Called with one step's micro-batches and its number (from 1), performs the step and returns its statistics:
    ``loss``, the criterion's ``stats`` and ``grad_norm`` as device tensors, ``lr`` (the rate it used) as a float."""

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
            context = contextlib.nullcontext() if sync else self.wrapped.no_sync()
            with context:
                with self.autocast():
                    output = self.wrapped(batch)
                result = self.criterion(self.model, output, batch)
                self.scaler.scale(result.loss / len(group)).backward()
            totals["loss"] = totals.get("loss", 0.0) + result.loss.detach() / len(group)
            for name, value in result.stats.items():
                totals[name] = totals.get(name, 0.0) + torch.as_tensor(value, device=self.device) / len(group)
        if self.max_grad_norm > 0:
            self.scaler.unscale_(self.optimizer)
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
            totals["grad_norm"] = norm.detach()
        self.guard.observe(step, totals["loss"], norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        totals["lr"] = self.optimizer.param_groups[0]["lr"]  # the rate this step used, before the schedule moves on
        self.scheduler.step()
        return totals
