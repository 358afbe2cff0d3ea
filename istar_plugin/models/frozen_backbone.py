"""A frozen backbone's work done once: the representation its task head reads, per example, keyed by the example's
real tokens, in memory up to ``memory_limit`` bytes, then in an unnamed file in ``spill_dir``.

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

import tempfile
from os import PathLike
from typing import Optional

import numpy as np
import torch
from torch import Tensor

MEMORY_LIMIT = 2 << 30  # bytes of vectors a cache holds in memory before it moves them to a file

CACHED_LINE = ("frozen backbone: its outputs are computed once per example and cached; it runs without dropout "
               "(model.frozen_dropout=true: dropout at every step, no cache)")  # what a run says then


class FrozenBackboneCache:
    """Per-example representations of a frozen backbone, keyed by the example's real tokens."""

    def __init__(self, memory_limit: Optional[int] = None, spill_dir: Optional[str | PathLike] = None) -> None:
        self.memory_limit = MEMORY_LIMIT if memory_limit is None else memory_limit
        self.spill_dir = spill_dir
        self._rows: dict[bytes, int] = {}  # key -> row
        self._in_memory: list[Tensor] = []
        self._file = None  # the rows on disk, once spilled
        self._mapped: Optional[np.memmap] = None  # a view of the file's first rows
        self.pooled: Optional[bool] = None  # whether the head reads a pooler output (BERT, ALBERT) or token 0

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def on_disk(self) -> bool:
        return self._file is not None

    @staticmethod
    def keys(inputs: dict[str, Tensor]) -> list[bytes]:
        """One key per row: its real tokens' ids (and segment ids), wherever the padding sits."""
        mask = inputs["attention_mask"].bool()
        columns = [inputs["input_ids"], *([inputs["token_type_ids"]] if "token_type_ids" in inputs else [])]
        rows = torch.stack(columns, dim=-1).cpu()
        return [rows[i][mask[i].cpu()].numpy().tobytes() for i in range(rows.shape[0])]

    def missing(self, keys: list[bytes]) -> list[int]:
        """The rows whose representation has not been computed yet."""
        return [i for i, key in enumerate(keys) if key not in self._rows]

    def store(self, keys: list[bytes], vectors: Tensor, pooled: Optional[bool] = None) -> None:
        """Keep ``vectors`` under ``keys`` (a key already kept keeps its vector); ``pooled``: what the head reads."""
        self.pooled = self.pooled if pooled is None else pooled
        new = {key: keys.index(key) for key in dict.fromkeys(keys) if key not in self._rows}  # each at its first row
        if not new:
            return
        rows = list(vectors.detach()[list(new.values())].float().cpu())  # only the new rows leave the device
        if self._file is None and (len(self._rows) + len(rows)) * rows[0].numel() * 4 > self.memory_limit:
            self._file = tempfile.TemporaryFile(dir=self.spill_dir)  # no name: gone with the process
            self._append(self._in_memory)
            self._in_memory = []
        for key in new:
            self._rows[key] = len(self._rows)
        if self._file is None:
            self._in_memory.extend(rows)
        else:
            self._append(rows)

    def _append(self, rows: list[Tensor]) -> None:
        if rows:
            self._file.seek(0, 2)
            self._file.write(torch.stack(rows).numpy().astype(np.float32).tobytes())
            self._file.flush()

    def lookup(self, keys: list[bytes]) -> Tensor:
        rows = [self._rows[key] for key in keys]
        if self._file is None:
            return torch.stack([self._in_memory[row] for row in rows])
        if self._mapped is None or self._mapped.shape[0] <= max(rows):  # rows were appended since the last mapping
            width = self._file.seek(0, 2) // 4 // len(self._rows)
            self._mapped = np.memmap(self._file, dtype=np.float32, mode="r", shape=(len(self._rows), width))
        return torch.from_numpy(np.array(self._mapped[rows]))


def cache_if_frozen(model, frozen_dropout: bool, spill_dir: Optional[str | PathLike] = None) -> bool:
    """Switch on ``model``'s frozen-backbone cache where it can and ``frozen_dropout`` is off; whether it is on."""
    return not frozen_dropout and hasattr(model, "cache_frozen_backbone") and model.cache_frozen_backbone(spill_dir)
