"""Padding-free batches: a padded batch's real tokens packed into one row (:func:`packed_inputs`), and the attention
:data:`PACKED_ATTENTION` confining each sequence's attention to itself.

>>> mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
>>> packing = Packing.of(mask)
>>> packing.positions.tolist(), packing.cu_seq_lens.tolist(), packing.first.tolist(), packing.last.tolist()
([0, 1, 2, 3], [0, 3, 4], [0, 3], [2, 3])
>>> packing.pack(torch.tensor([[5, 6, 7], [8, 0, 0]])).tolist(), packing.position_ids().tolist()
([[5, 6, 7, 8]], [[0, 1, 2, 0]])
>>> packing.rows.tolist(), packing.unpack(torch.tensor([5., 6., 7., 8.])).tolist()  # each token's sequence; back
([0, 0, 0, 1], [[5.0, 6.0, 7.0], [8.0, 0.0, 0.0]])
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import torch
from torch import Tensor
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from .dropout import Dropout, bits_dropout
from .padding_free import position_offset

PACKED_ATTENTION = "istar_packed"  # the attn_implementation of a model that computes padding-free


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a right-padded (batch, width) batch go in the packed row, and their sequences."""

    positions: Tensor
    cu_seq_lens: Tensor
    first: Tensor
    last: Tensor
    width: int
    attention_groups: Optional["AttentionPlan"] = None

    @classmethod
    def of(cls, attention_mask: Tensor, positions: Optional[Tensor] = None,
           lengths: Optional[Sequence[int]] = None) -> "Packing":
        """The packing of a batch from its attention mask (or the collator's ``positions`` and ``lengths``)."""
        if positions is None:
            positions = attention_mask.reshape(-1).bool().nonzero().squeeze(1)
        cu_seq_lens = torch.nn.functional.pad(attention_mask.sum(dim=1).cumsum(0), (1, 0)).to(torch.int32)
        first = cu_seq_lens[:-1].long()
        groups = None
        if lengths is not None:
            groups = attention_plan(tuple(itertools.accumulate(lengths, initial=0)), attention_mask.device, GROUP_COST)
        return cls(positions, cu_seq_lens, first, cu_seq_lens[1:].long() - 1, attention_mask.shape[1], groups)

    def pack(self, padded: Tensor) -> Tensor:
        """A (batch, width, ...) tensor's real positions as one row: (1, tokens, ...)."""
        return padded.reshape(-1, *padded.shape[2:]).index_select(0, self.positions).unsqueeze(0)

    @property
    def rows(self) -> Tensor:
        """(tokens,): the sequence (row of the padded batch) each packed token belongs to."""
        return self.positions // self.width

    def unpack(self, packed: Tensor) -> Tensor:
        """Packed (tokens, ...) values back in the padded (batch, width, ...) batch, zeros at the padding."""
        batch = self.cu_seq_lens.shape[0] - 1
        padded = packed.new_zeros(batch * self.width, *packed.shape[1:]).index_copy(0, self.positions, packed)
        return padded.view(batch, self.width, *packed.shape[1:])

    def position_ids(self) -> Tensor:
        """(1, tokens): each token's column, as a padded batch's positions count."""
        return (self.positions % self.width).unsqueeze(0)

    def model_inputs(self, inputs: Mapping[str, Tensor], padding_index: Optional[int] = None) -> dict[str, Any]:
        """The packed row's inputs, positions and :meth:`attention_kwargs`, as a Hugging Face model takes them;
        ``padding_index`` (RoBERTa's family): tokens equal to it sit at that position, the others count on from it."""
        input_ids = self.pack(inputs["input_ids"])
        packed = {"input_ids": input_ids, "position_ids": self.position_ids(), **self.attention_kwargs()}
        if padding_index is not None:  # as the family's own position ids: an empty sequence's pad token among them
            counted = input_ids[0] != padding_index
            before = torch.nn.functional.pad(counted.cumsum(0), (1, 0)).index_select(0, self.cu_seq_lens[:-1].long())
            column = counted.cumsum(0) - before.index_select(0, self.rows)
            packed["position_ids"] = torch.where(counted, column + padding_index, padding_index).unsqueeze(0)
        if inputs.get("token_type_ids") is not None:
            packed["token_type_ids"] = self.pack(inputs["token_type_ids"])
        return packed

    def attention_kwargs(self) -> dict[str, Any]:
        """What the model's forward passes through to :func:`packed_attention`."""
        kwargs = {"cu_seq_lens_q": self.cu_seq_lens, "cu_seq_lens_k": self.cu_seq_lens,
                  "max_length_q": self.width, "max_length_k": self.width}
        return kwargs if self.attention_groups is None else {**kwargs, "attention_groups": self.attention_groups}


GROUP_COST = 1024  # one more attention call, in query-key pairs (docs/architecture.md: padding-free batches)


def length_groups(lengths: Sequence[int], group_cost: int = GROUP_COST) -> list[list[int]]:
    """The sequences (indices into ``lengths``) that share one attention call, each padded to the group's longest,
    grouped to minimise ``size * longest^2`` per group plus ``group_cost`` per call."""
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    longest = [lengths[index] for index in order]
    best, cut = [0] + [0] * len(order), [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        best[end], cut[end] = min((best[start] + (end - start) * longest[start] ** 2 + group_cost, start)
                                  for start in range(end))
    groups, end = [], len(order)
    while end:
        groups.append(order[cut[end]:end])
        end = cut[end]
    return groups[::-1]


@dataclass(frozen=True)
class AttentionPlan:
    """How a packed row's attention runs: its sequences in groups (:func:`length_groups`), each group a zero-padded
    block of ``sequences x width`` slots. ``gather`` holds each slot's token of the packed row (a padding slot: its
    group's first token, which the slot's key-padding ``mask`` hides), ``scatter`` each token's slot in the blocks laid
    end to end; sequences of no token are in no group.

    >>> plan = attention_plan((0, 3, 3, 4), torch.device("cpu"), group_cost=10**9)  # lengths 3, 0, 1: one group
    >>> plan.gather.tolist(), plan.scatter.tolist(), [(s, w, m.flatten().tolist()) for s, w, m in plan.blocks]
    ([0, 1, 2, 3, 0, 0], [0, 1, 2, 3], [(2, 3, [True, True, True, True, False, False])])
    """

    gather: Tensor
    scatter: Tensor
    blocks: tuple[tuple[int, int, Tensor], ...]  # (sequences, width, key-padding mask (sequences, 1, 1, width))

    @property
    def sizes(self) -> list[int]:
        """Each block's slots, in order."""
        return [sequences * width for sequences, width, _ in self.blocks]


@functools.lru_cache(maxsize=16)
def attention_plan(cu_seq_lens: tuple[int, ...], device: torch.device, group_cost: int) -> AttentionPlan:
    """The :class:`AttentionPlan` of a packed row whose sequences end at ``cu_seq_lens`` (planned on the host)."""
    lengths = [end - start for start, end in zip(cu_seq_lens, cu_seq_lens[1:])]
    sequences = [index for index, length in enumerate(lengths) if length]
    gather, scatter, blocks = [], [0] * cu_seq_lens[-1], []
    for grouped in length_groups([lengths[index] for index in sequences], group_cost):
        group = [sequences[index] for index in grouped]
        width = max(lengths[index] for index in group)
        for index in group:
            start, length = cu_seq_lens[index], lengths[index]
            for column in range(length):
                scatter[start + column] = len(gather) + column
            gather += [*range(start, start + length), *[cu_seq_lens[group[0]]] * (width - length)]
        mask = torch.arange(width) < torch.tensor([lengths[index] for index in group]).unsqueeze(1)
        blocks.append((len(group), width, mask.view(len(group), 1, 1, width).to(device)))
    return AttentionPlan(torch.tensor(gather, dtype=torch.long, device=device),
                         torch.tensor(scatter, dtype=torch.long, device=device), tuple(blocks))


def packed_attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                     attention_mask: Optional[Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
                     is_causal: Optional[bool] = None, cu_seq_lens_q: Optional[Tensor] = None,
                     attention_groups: Optional[AttentionPlan] = None, **kwargs) -> tuple[Tensor, None]:
    """Attention over packed (1, heads, tokens, width) inputs confined to each sequence of ``cu_seq_lens_q``: each
    group of :class:`AttentionPlan` one ``scaled_dot_product_attention`` call on its padded block, gathered from the
    packed row in one index per input and scattered back in one."""
    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
    plan = attention_groups or attention_plan(tuple(cu_seq_lens_q.tolist()), query.device, GROUP_COST)
    heads, tokens = query.shape[1], query.shape[2]
    fast_dropout = query.device.type == "cpu" and any(isinstance(child, Dropout) for child in module.children())
    blocks = [packed[0].transpose(0, 1).reshape(tokens, -1).index_select(0, plan.gather).split(plan.sizes)
              for packed in (query, key, value)]  # (tokens, heads x d): a view where the projection laid it so
    outputs = []
    for (sequences, width, mask), *padded in zip(plan.blocks, *blocks):
        if causal:
            column = torch.arange(width, device=query.device)
            mask = mask & (column.unsqueeze(1) >= column).view(1, 1, width, width)
        query_block, key_block, value_block = [block.view(sequences, width, heads, -1).transpose(1, 2)
                                               for block in padded]
        if dropout and fast_dropout:  # model.fast_dropout: torch's math path, the masks from random bits
            scale = scaling if scaling is not None else query_block.shape[-1] ** -0.5
            scores = (query_block * scale) @ key_block.transpose(-1, -2)
            probabilities = scores.masked_fill(~mask, float("-inf")).softmax(-1)
            out = bits_dropout(probabilities, dropout) @ value_block
        else:
            out = torch.nn.functional.scaled_dot_product_attention(query_block, key_block, value_block, attn_mask=mask,
                                                                   dropout_p=dropout, scale=scaling)
        outputs.append(out.transpose(1, 2).reshape(sequences * width, -1))
    return torch.cat(outputs).index_select(0, plan.scatter).view(1, tokens, heads, -1), None


def _packed_mask(attention_mask: Optional[Tensor] = None, **kwargs) -> Optional[Tensor]:
    """``sdpa``'s mask for a padded batch; none without a padding mask (packed, or nothing padded)."""
    return None if attention_mask is None else sdpa_mask(attention_mask=attention_mask, **kwargs)


def packed_inputs(inputs: Mapping[str, Tensor], config, positions: Optional[Tensor] = None,
                  lengths: Optional[Sequence[int]] = None) -> tuple[dict[str, Any], Packing]:
    """A padded batch's ``inputs`` as the packed row a model of ``config`` takes, and their packing."""
    packing, offset = Packing.of(inputs["attention_mask"], positions, lengths), position_offset(config)
    return packing.model_inputs(inputs, offset - 1 if offset else None), packing  # RoBERTa's: after its padding index


AttentionInterface.register(PACKED_ATTENTION, packed_attention)
AttentionMaskInterface.register(PACKED_ATTENTION, _packed_mask)
