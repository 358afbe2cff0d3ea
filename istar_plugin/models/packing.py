"""Padding-free batches: a padded batch's real tokens packed into one row, and the attention that keeps each
sequence to itself.

:class:`Packing` says where each real token of a right-padded batch goes (its flat index in the padded batch, its
sequence's boundaries as cumulative lengths). :func:`packed_attention` is registered in transformers'
``ALL_ATTENTION_FUNCTIONS`` as :data:`PACKED_ATTENTION`: given the cumulative lengths (``cu_seq_lens_q``, the
keyword transformers' flash-attention path also reads, which every supported family's forward passes through to
its attention), it unpacks queries, keys and values to the padded (batch, heads, length, width) shape, runs torch's
``scaled_dot_product_attention`` with the key-padding mask (and causal within each sequence for decoders) and packs
the result back, so the token-wise layers (projections, feed-forward, norms) run on real tokens only. Without
cumulative lengths (a padded batch of the same model) it is transformers' ``sdpa`` attention itself, and its mask
function (:data:`ALL_MASK_ATTENTION_FUNCTIONS`) is ``sdpa``'s, except that a packed batch, which brings no padding
mask, gets none (the cumulative lengths confine the attention).

>>> mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
>>> packing = Packing.of(mask)
>>> packing.positions.tolist(), packing.cu_seq_lens.tolist(), packing.first.tolist(), packing.last.tolist()
([0, 1, 2, 3], [0, 3, 4], [0, 3], [2, 3])
>>> packing.pack(torch.tensor([[5, 6, 7], [8, 0, 0]])).tolist(), packing.position_ids().tolist()
([[5, 6, 7, 8]], [[0, 1, 2, 0]])
>>> sorted(packing.model_inputs({"input_ids": torch.tensor([[5, 6, 7], [8, 0, 0]])}))  # what the model's forward takes
['cu_seq_lens_k', 'cu_seq_lens_q', 'input_ids', 'max_length_k', 'max_length_q', 'position_ids']
>>> packing.rows.tolist(), packing.unpack(torch.tensor([5., 6., 7., 8.])).tolist()  # each token's sequence; back
([0, 0, 0, 1], [[5.0, 6.0, 7.0], [8.0, 0.0, 0.0]])
>>> query = torch.randn(1, 2, 4, 8)  # (1, heads, packed tokens, width)
>>> module = torch.nn.Module()
>>> module.is_causal = False  # an encoder's attention
>>> out, _ = packed_attention(module, query, query, query, None, **packing.attention_kwargs())
>>> out.shape  # (1, packed tokens, heads, width), as transformers' attention functions return
torch.Size([1, 4, 2, 8])
>>> alone, _ = packed_attention(module, query[:, :, 3:], query[:, :, 3:], query[:, :, 3:], None)  # sequence 2 alone
>>> torch.allclose(out[:, 3:], alone, atol=1e-6)
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import torch
from torch import Tensor
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

__all__ = ["PACKED_ATTENTION", "Packing", "packed_attention"]

PACKED_ATTENTION = "istar_packed"
"""The ``config._attn_implementation`` of a model that computes padding-free."""


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a right-padded (batch, width) batch go in the packed row.

    ``positions``: flat indices (row * width + column) of the real tokens, in order; ``cu_seq_lens``: the
    sequences' cumulative lengths (int32, batch + 1 entries, from 0); ``first``/``last``: each sequence's first and
    last token in the packed row; ``width``: the padded batch's width.
    """

    positions: Tensor
    cu_seq_lens: Tensor
    first: Tensor
    last: Tensor
    width: int

    @classmethod
    def of(cls, attention_mask: Tensor, positions: Optional[Tensor] = None) -> "Packing":
        """The packing of a batch from its attention mask; ``positions`` when the collator computed them on the host
        (:func:`~istar_plugin.training.batching.collate`), else read from the mask."""
        if positions is None:
            positions = attention_mask.reshape(-1).bool().nonzero().squeeze(1)
        lengths = attention_mask.sum(dim=1)
        cu_seq_lens = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
        first = cu_seq_lens[:-1].long()
        return cls(positions, cu_seq_lens, first, cu_seq_lens[1:].long() - 1, attention_mask.shape[1])

    def pack(self, padded: Tensor) -> Tensor:
        """A (batch, width, ...) tensor's real positions as one row: (1, tokens, ...)."""
        return padded.reshape(-1, *padded.shape[2:]).index_select(0, self.positions).unsqueeze(0)

    @property
    def rows(self) -> Tensor:
        """(tokens,): the sequence (row of the padded batch) each packed token belongs to."""
        return self.positions // self.width

    def unpack(self, packed: Tensor) -> Tensor:
        """Packed (tokens, ...) values back at their places in the padded (batch, width, ...) batch, zeros at the
        padding (the inverse of :meth:`pack`; gradients flow back to ``packed``)."""
        batch = self.cu_seq_lens.shape[0] - 1
        padded = packed.new_zeros(batch * self.width, *packed.shape[1:]).index_copy(0, self.positions, packed)
        return padded.view(batch, self.width, *packed.shape[1:])

    def position_ids(self, offset: int = 0) -> Tensor:
        """(1, tokens): each token's column, as a padded batch's positions count (+ ``offset``: RoBERTa's positions
        start after its padding index)."""
        return (self.positions % self.width + offset).unsqueeze(0)

    def model_inputs(self, inputs: Mapping[str, Tensor], position_offset: int = 0) -> dict[str, Any]:
        """What a Hugging Face model's forward takes to compute the padded batch ``inputs`` as one packed row: its
        ``input_ids`` (and ``token_type_ids``) packed, each token's ``position_ids`` (+ ``position_offset``) and
        :meth:`attention_kwargs`."""
        packed = {"input_ids": self.pack(inputs["input_ids"]), "position_ids": self.position_ids(position_offset),
                  **self.attention_kwargs()}
        if inputs.get("token_type_ids") is not None:
            packed["token_type_ids"] = self.pack(inputs["token_type_ids"])
        return packed

    def attention_kwargs(self) -> dict[str, Any]:
        """What the model's forward passes through to :func:`packed_attention`."""
        return {"cu_seq_lens_q": self.cu_seq_lens, "cu_seq_lens_k": self.cu_seq_lens,
                "max_length_q": self.width, "max_length_k": self.width}


def packed_attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                     attention_mask: Optional[Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
                     is_causal: Optional[bool] = None, cu_seq_lens_q: Optional[Tensor] = None,
                     max_length_q: Optional[int] = None, **kwargs) -> tuple[Tensor, None]:
    """Attention over packed (1, heads, tokens, width) queries, keys and values confined to each sequence of
    ``cu_seq_lens_q``: unpacked to (batch, heads, ``max_length_q``, width), torch's scaled dot-product attention
    with the key-padding mask (and causal for a causal ``module``), packed back to (1, tokens, heads, width).
    Without ``cu_seq_lens_q``: transformers' ``sdpa`` attention."""
    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    heads, tokens = query.shape[1], query.shape[2]
    batch, width = cu_seq_lens_q.shape[0] - 1, int(max_length_q)
    starts = cu_seq_lens_q.long()
    token = torch.arange(tokens, device=query.device)
    row = torch.searchsorted(starts[1:], token, right=True)
    flat = row * width + token - starts[row]  # each packed token's place in the padded batch

    def unpack(packed: Tensor) -> Tensor:
        padded = packed.new_zeros(packed.shape[1], batch * width, packed.shape[3])
        padded = padded.index_copy(1, flat, packed[0])
        return padded.view(packed.shape[1], batch, width, packed.shape[3]).transpose(0, 1)

    column = torch.arange(width, device=query.device)
    mask = (column < (starts[1:] - starts[:-1]).unsqueeze(1)).view(batch, 1, 1, width)
    if is_causal if is_causal is not None else getattr(module, "is_causal", False):
        mask = mask & (column.unsqueeze(1) >= column).view(1, 1, width, width)
    out = torch.nn.functional.scaled_dot_product_attention(unpack(query), unpack(key), unpack(value), attn_mask=mask,
                                                           dropout_p=dropout, scale=scaling)
    out = out.transpose(0, 1).reshape(heads, batch * width, -1).index_select(1, flat)
    return out.transpose(0, 1).unsqueeze(0), None


def _packed_mask(attention_mask: Optional[Tensor] = None, **kwargs) -> Optional[Tensor]:
    """``sdpa``'s mask for a padded batch; none for a batch without a padding mask (a packed one: the cumulative
    lengths confine its attention; an unpadded one: all its positions are tokens, causal by ``is_causal``)."""
    return None if attention_mask is None else sdpa_mask(attention_mask=attention_mask, **kwargs)


ALL_ATTENTION_FUNCTIONS.register(PACKED_ATTENTION, packed_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_ATTENTION, _packed_mask)
