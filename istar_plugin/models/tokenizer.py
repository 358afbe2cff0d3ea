"""A model's tokenizer alone, without its weights: what the trainer's checks of the examples against the settings read
before the model loads (the room a SQuAD window leaves beside its longest question).

>>> from istar_plugin.models.config import ModelConfig
>>> tokenizer = load_tokenizer(ModelConfig())  # the packaged all-MiniLM-L6-v2
>>> tokenizer.is_fast, tokenizer.num_special_tokens_to_add(pair=True)
(True, 3)
"""
from __future__ import annotations

from typing import Any

from transformers import AutoTokenizer

from .config import ModelConfig
from .paths import gguf_options, resolve_model_path


def load_tokenizer(cfg: ModelConfig) -> Any:
    """The fast tokenizer of ``cfg``'s model (a slow one where there is none), found as the model adapter finds it."""
    folder, options = gguf_options(resolve_model_path(cfg.name_or_path))
    return AutoTokenizer.from_pretrained(folder, use_fast=True, revision=cfg.revision,
                                         local_files_only=cfg.local_files_only, **options)
