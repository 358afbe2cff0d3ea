"""The task loss alone: cross-entropy, mean squared error or start/end cross-entropy, and the baseline criterion.

A criterion is called as ``criterion(model, output, batch) -> CriterionOutput`` where ``model`` is the
(unwrapped) adapter, ``output`` its :class:`~istar_plugin.models.EncoderOutput` and ``batch`` the tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch.nn.functional as F
from torch import Tensor

from ..registry import CRITERIONS


@dataclass
class CriterionOutput:
    """The loss to back-propagate and additive statistics (detached scalars) for logging."""

    loss: Tensor
    stats: dict[str, Tensor] = field(default_factory=dict)


def task_loss(kind: str, output, batch: dict[str, Tensor]) -> Tensor:
    """Cross-entropy (classification), mean squared error (regression) or mean start/end cross-entropy (QA).

    >>> import torch
    >>> from types import SimpleNamespace
    >>> out = SimpleNamespace(logits=torch.tensor([[0.0, 0.0]]))
    >>> round(task_loss("classification", out, {"labels": torch.tensor([1])}).item(), 4)  # log 2
    0.6931
    """
    if kind == "classification":
        return F.cross_entropy(output.logits.float(), batch["labels"])
    if kind == "regression":
        return F.mse_loss(output.logits.float().squeeze(-1), batch["labels"].float())
    if kind == "extractive_qa":
        length = output.start_logits.shape[1]
        start = batch["start_positions"].clamp(0, length - 1)
        end = batch["end_positions"].clamp(0, length - 1)
        return 0.5 * (F.cross_entropy(output.start_logits.float(), start) + F.cross_entropy(output.end_logits.float(), end))
    raise ValueError(f"unknown task kind {kind!r}; choose one of: classification, regression, extractive_qa")


@dataclass
class CrossEntropyConfig:
    """The task loss alone (no configuration)."""


@CRITERIONS.register("cross_entropy", CrossEntropyConfig)
class CrossEntropyCriterion:
    """Task loss only: the baseline every regulariser is compared with."""

    def __init__(self, cfg: CrossEntropyConfig, kind: str):
        self.cfg, self.kind = cfg, kind

    def hooks(self) -> list:
        return []

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        loss = task_loss(self.kind, output, batch)
        return CriterionOutput(loss, {"task_loss": loss.detach()})


