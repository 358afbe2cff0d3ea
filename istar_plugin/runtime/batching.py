"""Batches: the order of training examples (a seeded permutation per epoch, split over ranks, optionally
grouped by length) and their collation into padded device tensors.

>>> sorted(epoch_order(5, seed=1, epoch=0, rank=0, world_size=2)
...        + epoch_order(5, seed=1, epoch=0, rank=1, world_size=2))[:5]
[0, 1, 2, 3, 4]
>>> batch = collate([{"input_ids": [5, 6, 7], "labels": 1}, {"input_ids": [8], "labels": 0}],
...                 pad_id=0, device=torch.device("cpu"))
>>> batch["input_ids"].tolist(), batch["token_positions"].tolist(), batch["sequence_lengths"]
([[5, 6, 7], [8, 0, 0]], [0, 1, 2, 3], (3, 1))
>>> collate([{"input_ids": [], "attention_mask": []}], pad_id=2, device=torch.device("cpu"))["input_ids"].tolist()
[[2]]
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch

TENSOR_FIELDS = ("input_ids", "attention_mask", "token_type_ids", "labels", "start_positions", "end_positions")


def collate(features: Sequence[dict[str, Any]], pad_id: int, device: torch.device) -> dict[str, Any]:
    """Features padded to the longest on ``device`` with the real tokens' ``token_positions``, ``sequence_lengths``;
    an empty sequence is its pad token (a decoder's end of text), one real token to read in either mode."""
    features = [feature if len(feature["input_ids"]) else _one_pad_token(feature, pad_id) for feature in features]
    lengths = [len(f["input_ids"]) for f in features]
    width = max(lengths)
    batch: dict[str, torch.Tensor] = {}
    for name in TENSOR_FIELDS:
        if features[0].get(name) is None:
            continue
        values = [f[name] for f in features]
        if name in ("input_ids", "attention_mask", "token_type_ids"):
            fill = pad_id if name == "input_ids" else 0
            batch[name] = torch.tensor([list(v) + [fill] * (width - len(v)) for v in values], dtype=torch.long)
        else:
            batch[name] = torch.tensor(values, dtype=torch.float32 if isinstance(values[0], float) else torch.long)
    batch["token_positions"] = torch.cat([torch.arange(length) + row * width for row, length in enumerate(lengths)])
    if device.type == "cuda":
        batch = {k: v.pin_memory() for k, v in batch.items()}
    return {**{k: v.to(device, non_blocking=True) for k, v in batch.items()}, "sequence_lengths": tuple(lengths)}


def _one_pad_token(feature: dict[str, Any], pad_id: int) -> dict[str, Any]:
    sequence = {"input_ids": [pad_id], "attention_mask": [1], "token_type_ids": [0]}
    return {**feature, **{name: value for name, value in sequence.items() if feature.get(name) is not None
                          or name == "input_ids"}}


def epoch_order(num_examples: int, seed: int, epoch: int, rank: int, world_size: int,
                lengths: Optional[Sequence[int]] = None, batch_size: int = 1) -> list[int]:
    """This rank's share of the epoch's seeded permutation (length-grouped given ``lengths``), equal on every rank."""
    if lengths is None:
        order = torch.randperm(num_examples, generator=torch.Generator().manual_seed(seed * 7919 + epoch)).tolist()
    else:
        order = length_grouped_order(lengths, batch_size, seed, epoch)
    per_rank = math.ceil(num_examples / world_size)
    order += order[: per_rank * world_size - num_examples]
    return order[rank::world_size]


def length_grouped_order(lengths: Sequence[int], batch_size: int, seed: int, epoch: int) -> list[int]:
    """A seeded permutation whose ``batch_size`` slices hold similar lengths, as transformers' length grouping."""
    generator = torch.Generator().manual_seed(seed * 7919 + epoch)
    order = torch.randperm(len(lengths), generator=generator).tolist()
    mega = batch_size * max(1, min(50, len(lengths) // (4 * batch_size)))
    ranked = [i for start in range(0, len(order), mega)
              for i in sorted(order[start : start + mega], key=lambda i: lengths[i], reverse=True)]
    batches = [ranked[start : start + batch_size] for start in range(0, len(ranked), batch_size)]
    full = batches if len(batches[-1]) == batch_size else batches[:-1]
    shuffled = [full[i] for i in torch.randperm(len(full), generator=generator).tolist()] + batches[len(full):]
    return [i for batch in shuffled for i in batch]
