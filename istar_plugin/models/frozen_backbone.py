"""A frozen backbone's work done once: the representation its task head reads, per example, computed on first
sight and looked up after.

When nothing in the backbone trains (the Isotropy Layer's stage 2, a head-only stage) and its dropout is off,
what it gives the head is a function of the example's tokens alone. :class:`FrozenBackboneCache` keys each
example by its real tokens (padding and batch composition do not change the key) and holds its representation
(float32, one d-vector per example: 49 MB for 16,000 examples at d 768). :func:`standin_output` is what the
backbone would have returned, built from those vectors, for the head to read as usual.

>>> import torch
>>> cache = FrozenBackboneCache()
>>> ids, mask = torch.tensor([[101, 7, 102, 0], [101, 7, 102, 0]]), torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
>>> keys = cache.keys({"input_ids": ids, "attention_mask": mask})
>>> keys[0] == keys[1], cache.missing(keys)  # the same sentence twice: one key, not yet computed
(True, [0, 1])
>>> cache.store(keys[:1], torch.ones(1, 4))
>>> cache.missing(keys), cache.lookup(keys).shape, len(cache)
([], torch.Size([2, 4]), 1)
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from transformers.modeling_outputs import BaseModelOutputWithPooling

__all__ = ["FrozenBackboneCache", "standin_output", "cache_if_frozen", "CACHED_LINE"]

CACHED_LINE = ("frozen backbone: its outputs are computed once per example and cached; it runs without dropout "
               "(model.frozen_dropout=true: dropout at every step, no cache)")
"""What a run says when its backbone is cached."""


class FrozenBackboneCache:
    """Per-example representations of a frozen backbone, keyed by the example's real tokens."""

    def __init__(self) -> None:
        self._vectors: dict[bytes, Tensor] = {}
        self.pooled: Optional[bool] = None  # whether the head reads a pooler output (BERT, ALBERT) or token 0

    def __len__(self) -> int:
        return len(self._vectors)

    @staticmethod
    def keys(inputs: dict[str, Tensor]) -> list[bytes]:
        """One key per row: its real tokens' ids (and segment ids), wherever the padding sits."""
        mask = inputs["attention_mask"].bool()
        columns = [inputs["input_ids"], *([inputs["token_type_ids"]] if "token_type_ids" in inputs else [])]
        rows = torch.stack(columns, dim=-1).cpu()
        return [rows[i][mask[i].cpu()].numpy().tobytes() for i in range(rows.shape[0])]

    def missing(self, keys: list[bytes]) -> list[int]:
        """The rows whose representation has not been computed yet."""
        return [i for i, key in enumerate(keys) if key not in self._vectors]

    def store(self, keys: list[bytes], vectors: Tensor) -> None:
        for key, vector in zip(keys, vectors.detach().float()):
            self._vectors[key] = vector

    def remember(self, keys: list[bytes], missing: list[int], vectors: Tensor, pooled: bool) -> None:
        """Store ``vectors`` (one per row of ``missing``) under those rows' keys; ``pooled``: what the head reads."""
        self.store([keys[i] for i in missing], vectors)
        self.pooled = pooled

    def lookup(self, keys: list[bytes]) -> Tensor:
        return torch.stack([self._vectors[key] for key in keys])


def standin_output(representation: Tensor, pooled: bool) -> BaseModelOutputWithPooling:
    """What the backbone returns, as far as its task head reads it: the pooled output (BERT, ALBERT) or the first
    token's state (RoBERTa, DistilBERT, ELECTRA read ``last_hidden_state[:, 0]``)."""
    return BaseModelOutputWithPooling(last_hidden_state=representation.unsqueeze(1),
                                      pooler_output=representation if pooled else None)


def cache_if_frozen(model, frozen_dropout: bool) -> bool:
    """Switch on ``model``'s frozen-backbone cache (when it has one, nothing in its backbone trains and
    ``frozen_dropout`` is off); whether it is on."""
    return not frozen_dropout and hasattr(model, "cache_frozen_backbone") and model.cache_frozen_backbone()
