"""The ``data`` section of a run config: where a task's examples come from and how they are cut.

>>> DataConfig(source="files", dir="/data/sst2", max_train_samples=100).max_train_samples
100
>>> DataConfig(source="web")
Traceback (most recent call last):
...
ValueError: data.source 'web' is not supported; choose one of: files, hub, packaged
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

SOURCES = ("files", "hub", "packaged")
CACHE_ENV_VAR = "ISTAR_CACHE"


@dataclass
class DataConfig:
    """Data source and preprocessing limits of one task.

    ``max_train_samples`` / ``max_eval_samples`` keep the first N examples of a split in file (or hub)
    order, after the task's own filtering, like ``datasets.Dataset.select(range(N))``.
    ``validation_split`` > 0 holds that share of the (capped) training set out, a shuffle seeded by
    ``split_seed`` (not the run's seed: every seed and every stage of a two-stage method sees the same
    split), as the validation set of early stopping (``patience``); metrics stay on the evaluation split.
    ``group_by_length`` and ``sort_eval_by_length`` only change how the trainer batches the examples.
    Language modelling (task ``lm``) reads its texts from ``train_file``/``eval_file``, from the hub data set
    ``hub_dataset`` (``NAME`` or ``NAME:CONFIG``, with ``source=hub``), or from the task named by ``text_from``.
    """

    source: str = "files"
    dir: Optional[str] = None
    train_file: Optional[str] = None
    eval_file: Optional[str] = None
    eval_split: Optional[str] = None
    cache_dir: Optional[str] = None
    max_train_samples: Optional[int] = None
    max_eval_samples: Optional[int] = None
    max_length: int = 128
    doc_stride: int = 128
    split_seed: int = 0
    validation_split: float = 0.0  # share of the training set held out for model selection / early stopping
    group_by_length: bool = False  # training batches drawn from length bands (less padding computed)
    sort_eval_by_length: bool = True  # evaluation batches of similar lengths, results restored to data order
    text_from: Optional[str] = None  # task lm: the texts of this registered task (e.g. sst2)
    hub_dataset: Optional[str] = None  # task lm with source=hub: NAME or NAME:CONFIG, its "text" column

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"data.source {self.source!r} is not supported; choose one of: {', '.join(SOURCES)}")
        for name in ("max_train_samples", "max_eval_samples"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"data.{name} must be a positive integer or None, got {value!r}")
        if self.max_length < 8:
            raise ValueError(f"data.max_length must be at least 8 tokens, got {self.max_length!r}")
        if not 0.0 <= self.validation_split < 1.0:
            raise ValueError(f"data.validation_split must lie in [0, 1) (0: no validation set), got {self.validation_split!r}")
        if self.doc_stride < 1:
            raise ValueError(f"data.doc_stride must be a positive number of tokens, got {self.doc_stride!r}")

    def resolved_cache_dir(self) -> Path:
        """``cache_dir``, else ``$ISTAR_CACHE``, else ``~/.cache/istar_plugin``.

        >>> DataConfig(cache_dir="/tmp/c").resolved_cache_dir()
        PosixPath('/tmp/c')
        """
        chosen = self.cache_dir or os.environ.get(CACHE_ENV_VAR) or Path.home() / ".cache" / "istar_plugin"
        return Path(chosen).expanduser()
