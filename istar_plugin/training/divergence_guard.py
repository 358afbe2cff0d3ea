"""Stop a run whose loss or gradient norm became NaN or infinite, naming the first such step (one host sync a check)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..errors import DivergedError

_NONE = torch.iinfo(torch.int64).max  # "no failure yet"; the smallest failed step wins across ranks
_NONE_AS_FLOAT = float(2**62)  # _NONE read back through float64


class NonFiniteGuard:
    """Tracks, on the device, the first optimizer step at which the run counts as diverged.
    ``patience``: consecutive non-finite steps tolerated (fp16); ``hint``: the likely cause, said with the error."""

    def __init__(self, device: torch.device, patience: int = 0, hint: Optional[str] = None):
        self.patience, self.hint = patience, hint
        self.first_failed = torch.tensor(_NONE, dtype=torch.int64, device=device)
        self.loss_at_failure = torch.tensor(0.0, device=device)
        self.norm_at_failure = torch.tensor(0.0, device=device)
        self.consecutive = torch.tensor(0, dtype=torch.int64, device=device)

    def observe(self, step: int, loss: torch.Tensor, grad_norm: Optional[torch.Tensor] = None) -> None:
        """Record optimizer step ``step``'s (detached) loss and gradient norm; device-side only."""
        loss = loss.detach().float()
        norm = loss.new_tensor(0.0) if grad_norm is None else grad_norm.detach().float()
        finite = torch.isfinite(loss) & torch.isfinite(norm)
        self.consecutive = torch.where(finite, torch.zeros_like(self.consecutive), self.consecutive + 1)
        newly = (self.consecutive > self.patience) & (self.first_failed == _NONE)
        # the first non-finite step of the run of failures that exhausted the patience
        first_of_run = torch.full_like(self.first_failed, step) - self.consecutive + 1
        self.first_failed = torch.where(newly, first_of_run, self.first_failed)
        self.loss_at_failure = torch.where(newly, loss, self.loss_at_failure)
        self.norm_at_failure = torch.where(newly, norm, self.norm_at_failure)

    def check(self, world_size: int = 1, also: Optional[torch.Tensor] = None) -> list[float]:
        """Raise :class:`DivergedError` if any rank diverged; returns ``also`` (device values read in the same sync)."""
        first = self.first_failed
        if world_size > 1:
            import torch.distributed as dist

            first = first.clone()
            dist.all_reduce(first, op=dist.ReduceOp.MIN)
        state = torch.stack([first.to(torch.float64), self.loss_at_failure.to(torch.float64),
                             self.norm_at_failure.to(torch.float64)])  # steps < 2**53 are exact in float64
        values = (state if also is None else torch.cat([state, also.detach().to(torch.float64).reshape(-1)])).tolist()
        step, loss, norm = values[:3]
        if step >= _NONE_AS_FLOAT:
            return values[3:]
        step = int(step)
        if math.isfinite(loss):
            message = f"the gradient norm became {norm} at step {step} (loss {loss:.4g})"
        else:
            message = f"the loss became {loss} at step {step} (gradient norm {norm})"
        if self.patience:
            message += f" and stayed non-finite for more than optim.overflow_patience={self.patience} steps"
        message += "; stopped, no checkpoint written from that step on"
        raise DivergedError(message + (f"; likely cause: {self.hint}" if self.hint else ""))


def likely_cause(lr: float, precision: str, lam: Optional[float]) -> str:
    """A short guess at why a run diverged, from the settings that usually cause it."""
    if lr > 1e-2:
        return f"optim.lr={lr} is far above fine-tuning rates (1e-5 to 1e-4): lower it"
    if precision == "fp16":
        return "fp16 overflow the GradScaler could not absorb: use precision=bf16 or fp32"
    if lam is not None and abs(lam) > 10:
        return f"criterion.lam={lam} makes the penalty dominate the loss: try |lam| <= 5"
    return "the learning rate (lower optim.lr), or non-finite inputs or labels in the data"
