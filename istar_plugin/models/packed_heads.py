"""What the task heads read from a packed row (padding-free batches, :mod:`.packing`): the pooler on each sequence's
first token, and a per-token head's outputs as the loss reads them.

>>> from types import SimpleNamespace
>>> packing = Packing.of(torch.tensor([[1, 1, 1], [1, 0, 0]]))
>>> spans = SimpleNamespace(start_logits=torch.tensor([[1., 2., 3., 4.]]), end_logits=torch.tensor([[4., 3., 2., 1.]]))
>>> token_outputs_unpacked(spans, packing).start_logits.tolist()  # back at their places, zeros at the padding
[[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]
>>> token_outputs_unpacked(SimpleNamespace(logits=torch.zeros(1, 4, 10)), packing).logits.shape  # LM: packed
torch.Size([4, 10])
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from .packing import Packing

__all__ = ["pooled_first_tokens", "token_outputs_unpacked"]


def pooled_first_tokens(backbone: torch.nn.Module, first_tokens: Tensor) -> Optional[Tensor]:
    """The backbone's pooler output for its sequences' first tokens, (batch, hidden): BERT's pooler reads a
    (batch, length, hidden) tensor's first position, ALBERT's is a linear layer and an activation; None without one."""
    pooler = getattr(backbone, "pooler", None)
    if pooler is None:
        return None
    activation = getattr(backbone, "pooler_activation", None)
    return pooler(first_tokens.unsqueeze(1)) if activation is None else activation(pooler(first_tokens))


def token_outputs_unpacked(out: Any, packing: Packing) -> Any:
    """A per-token head's output on the packed row as the loss reads it: span logits back at their places in the
    padded (batch, length) batch, a language model's logits packed, (tokens, vocabulary)."""
    if getattr(out, "start_logits", None) is not None:
        out.start_logits, out.end_logits = packing.unpack(out.start_logits[0]), packing.unpack(out.end_logits[0])
    else:
        out.logits = out.logits[0]
    return out
