"""The order of training examples: a seeded permutation per epoch, split over ranks, optionally grouped by length.

>>> sorted(epoch_order(5, seed=1, epoch=0, rank=0, world_size=2) + epoch_order(5, seed=1, epoch=0, rank=1, world_size=2))[:5]
[0, 1, 2, 3, 4]
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch


def epoch_order(num_examples: int, seed: int, epoch: int, rank: int, world_size: int,
                lengths: Optional[Sequence[int]] = None, batch_size: int = 1) -> list[int]:
    """This rank's share of the epoch's seeded permutation, padded (by wrapping) to equal length on every rank.

    With ``lengths``, the permutation is :func:`length_grouped_order` for global batches of ``batch_size``
    (rank r takes every world_size-th example, so each rank's share of a global batch is its own length band).

    >>> len(epoch_order(5, 0, 0, 0, 2)) == len(epoch_order(5, 0, 0, 1, 2)) == 3
    True
    """
    if lengths is None:
        generator = torch.Generator().manual_seed(seed * 7919 + epoch)
        order = torch.randperm(num_examples, generator=generator).tolist()
    else:
        order = length_grouped_order(lengths, batch_size, seed, epoch)
    per_rank = math.ceil(num_examples / world_size)
    order += order[: per_rank * world_size - num_examples]
    return order[rank::world_size]


def length_grouped_order(lengths: Sequence[int], batch_size: int, seed: int, epoch: int) -> list[int]:
    """A seeded permutation whose consecutive ``batch_size`` slices hold sentences of similar length.

    As ``transformers``' length-grouped sampler: the epoch's random permutation is cut into mega-batches
    of up to 50 batches (at least 4 mega-batches), each sorted by length; the full batches are then
    shuffled and a partial last batch stays last, so every batch is still a random draw of a length band.

    >>> lengths = [(7 * i) % 32 + 1 for i in range(32)]  # 1..32, shuffled
    >>> def spreads(order):  # longest minus shortest length in each batch of 4
    ...     return [max(lengths[i] for i in order[k:k + 4]) - min(lengths[i] for i in order[k:k + 4]) for k in range(0, 32, 4)]
    >>> spreads(length_grouped_order(lengths, 4, seed=0, epoch=0)), spreads(epoch_order(32, 0, 0, 0, 1))
    ([14, 12, 8, 6, 7, 6, 17, 16], [21, 26, 19, 18, 25, 29, 21, 23])
    """
    generator = torch.Generator().manual_seed(seed * 7919 + epoch)
    order = torch.randperm(len(lengths), generator=generator).tolist()
    mega = batch_size * max(1, min(50, len(lengths) // (4 * batch_size)))
    ranked = [i for start in range(0, len(order), mega)
              for i in sorted(order[start : start + mega], key=lambda i: lengths[i], reverse=True)]
    batches = [ranked[start : start + batch_size] for start in range(0, len(ranked), batch_size)]
    full = batches if len(batches[-1]) == batch_size else batches[:-1]
    shuffled = [full[i] for i in torch.randperm(len(full), generator=generator).tolist()] + batches[len(full):]
    return [i for batch in shuffled for i in batch]
