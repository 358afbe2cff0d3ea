"""The task loss of each task kind, the :class:`Criterion` base class and the baseline criterion ``cross_entropy``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from ..registry import CRITERIONS

if TYPE_CHECKING:
    from torch import Tensor

    from ..models.packing import Packing


@dataclass
class CriterionOutput:
    """The loss to back-propagate and additive statistics (detached scalars) for logging."""

    loss: Tensor
    stats: dict[str, Tensor] = field(default_factory=dict)


def next_token_nll(logits: Tensor, input_ids: Tensor, attention_mask: Tensor,
                   packing: Optional[Packing] = None) -> tuple[Tensor, Tensor]:
    """Per sequence: the summed NLL (float32, nats) of each real token given the ones before it, and how many
    tokens were predicted. ``packing``: the logits are a padding-free forward's (tokens, vocabulary)."""
    import torch
    import torch.nn.functional as F

    if packing is None:
        predicted = (attention_mask[:, 1:] * attention_mask[:, :-1]).bool()
        nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), input_ids[:, 1:], reduction="none")
        return torch.where(predicted, nll, 0.0).sum(dim=1), predicted.sum(dim=1)
    rows = packing.rows  # a token predicts the next one of its own sequence only
    predicted = rows[1:] == rows[:-1]
    nll = F.cross_entropy(logits[:-1].float(), packing.pack(input_ids)[0][1:], reduction="none")
    sequences = packing.cu_seq_lens.shape[0] - 1
    return (nll.new_zeros(sequences).index_add(0, rows[:-1], torch.where(predicted, nll, 0.0)),
            rows.new_zeros(sequences).index_add(0, rows[:-1], predicted.long()))


def task_loss(kind: str, output, batch: dict[str, Tensor]) -> Tensor:
    """The task loss of a task kind: cross-entropy, mean squared error, start/end or next-token cross-entropy."""
    import torch.nn.functional as F

    if kind == "classification":
        return F.cross_entropy(output.logits.float(), batch["labels"])
    if kind == "regression":
        return F.mse_loss(output.logits.float().squeeze(-1), batch["labels"].float())
    if kind == "extractive_qa":
        length = output.start_logits.shape[1]
        start = batch["start_positions"].clamp(0, length - 1)
        end = batch["end_positions"].clamp(0, length - 1)
        return 0.5 * (F.cross_entropy(output.start_logits.float(), start)
                      + F.cross_entropy(output.end_logits.float(), end))
    if kind == "language_modeling":
        nll, count = next_token_nll(output.logits, batch["input_ids"], output.attention_mask,
                                    getattr(output, "packing", None))
        return nll.sum() / count.sum().clamp(min=1)
    raise ValueError(f"unknown task kind {kind!r}; choose one of: classification, regression, extractive_qa, "
                     "language_modeling")


@dataclass
class CrossEntropyConfig:
    """The task loss alone (no configuration)."""


class Criterion:
    """Base class of criterions, called as ``criterion(model, output, batch) -> CriterionOutput``."""

    needs_init_from = False  # True: the criterion trains a fine-tuned model (init_from= is required)

    def __init__(self, cfg, kind: str):
        self.cfg, self.kind = cfg, kind

    @classmethod
    def check_setup(cls, cfg, adapter: type, kind: str) -> None:
        """Raise ValueError (one line) if ``cfg`` cannot run with this model adapter class and task kind."""

    @classmethod
    def check_hidden_size(cls, cfg, hidden_size: int) -> None:
        """Raise ValueError (one line) if ``cfg`` cannot run on a model of this hidden size."""

    def hooks(self) -> list:
        return []

    def constant_penalty(self) -> Optional[str]:
        """Why this criterion's penalty is a constant with these settings (by default: ``lam`` 0), else None."""
        if getattr(self.cfg, "lam", None) == 0:
            return "criterion.lam=0: the penalty is 0, so the run trains on the task loss alone"
        return None

    def adapt(self, model) -> None:
        """Change ``model`` (the unwrapped adapter) once, before a checkpoint is restored; by default not at all."""

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        raise NotImplementedError


@CRITERIONS.register("cross_entropy", CrossEntropyConfig)
class CrossEntropyCriterion(Criterion):
    """Task loss only: the baseline every regulariser is compared with."""

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        loss = task_loss(self.kind, output, batch)
        return CriterionOutput(loss, {"task_loss": loss.detach()})
