"""The ``data`` section of a run config: where a task's examples come from and how they are cut."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..settings import check_fields, setting

CACHE_ENV_VAR = "ISTAR_CACHE"
_POSITIVE_OR_NONE = "{key} must be a positive integer or None, got {value!r}"
MAX_TOKENS = 2 ** 24  # the most tokens data.max_length and data.doc_stride may name; a model's positions refuse less


@dataclass
class DataConfig:
    """Data source and preprocessing limits of one task (each field's ``help`` says what it does)."""

    source: str = setting("files", help="where the examples come from", choices=("files", "hub", "packaged"),
                          refused="{key} {value!r} is not supported; choose one of: {choices}")
    dir: Optional[str] = setting(None, help="source=files: the folder holding the task's files")
    train_file: Optional[str] = setting(None, help="source=files: the training split's file (instead of dir)")
    eval_file: Optional[str] = setting(None, help="source=files: the evaluation split's file (instead of dir)")
    eval_split: Optional[str] = setting(None, help="the split evaluated on; None: the task's own choice; held_out: the "
                                                   "share validation_split holds out of the training set")
    cache_dir: Optional[str] = setting(None, help=f"where hub data are cached; None: ${CACHE_ENV_VAR}, else "
                                                  "~/.cache/istar_plugin")
    max_train_samples: Optional[int] = setting(None, help="keep the first N training examples; None: all", low=1,
                                               refused=_POSITIVE_OR_NONE)
    max_eval_samples: Optional[int] = setting(None, help="keep the first N evaluation examples; None: all", low=1,
                                              refused=_POSITIVE_OR_NONE)
    max_length: int = setting(128, help="tokens per example, longer ones cut", low=8, high=MAX_TOKENS,
                              refused=f"{{key}} must be 8 to {MAX_TOKENS} tokens, got {{value!r}}")
    doc_stride: int = setting(128, help="squad: tokens between the starts of a long context's windows", low=1,
                              high=MAX_TOKENS, refused=f"{{key}} must be 1 to {MAX_TOKENS} tokens, got {{value!r}}")
    split_seed: int = setting(0, help="the seed of the validation split's shuffle", low=0, high=2 ** 32 - 1)
    validation_split: float = setting(0.0, help="share of the training set held out for model selection / early "
                                                "stopping (0: no validation set)", low=0, high=1, high_open=True,
                                      refused="{key} must lie in [0, 1) (0: no validation set), got {value!r}")
    group_by_length: bool = setting(False, help="training batches drawn from length bands (less padding computed)")
    sort_eval_by_length: bool = setting(True, help="evaluation batches of similar lengths, results restored to data "
                                                   "order")
    text_from: Optional[str] = setting(None, help="task lm: the texts of this registered task (e.g. sst2)", added=True)
    hub_dataset: Optional[str] = setting(None, help='task lm with source=hub: NAME or NAME:CONFIG, its "text" column',
                                         added=True)

    def __post_init__(self) -> None:
        check_fields(self, "data.")

    def resolved_cache_dir(self) -> Path:
        """``cache_dir``, else ``$ISTAR_CACHE``, else ``~/.cache/istar_plugin``."""
        chosen = self.cache_dir or os.environ.get(CACHE_ENV_VAR) or Path.home() / ".cache" / "istar_plugin"
        return Path(chosen).expanduser()
