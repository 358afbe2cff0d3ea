"""The engine ``sentence_transformers`` (:mod:`.st_engine`), declared without importing torch, with what it refuses
before anything loads.

>>> from istar_plugin.config import compose
>>> compose(["engine=sentence_transformers", "task=stsb", "model.lora.r=8"])
Traceback (most recent call last):
...
istar_plugin.errors.ConfigError: engine=sentence_transformers trains every weight (no LoRA); drop model.lora.r=8
"""
from __future__ import annotations

from dataclasses import fields

from omegaconf import DictConfig

from ..errors import ConfigError
from ..models.config import LoraSettings
from ..registry import ENGINES, TASKS
from ..training.engine_setup import EngineSetup

CRITERIA = ("cross_entropy", "istar")


class SentenceTransformersSetup(EngineSetup):
    """The compose-time half of :class:`~.st_engine.SentenceTransformersEngine` (which inherits it)."""

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        """What this engine cannot run, refused in one line before anything loads."""
        name = cfg.criterion.name
        if name not in CRITERIA:
            raise ConfigError(f"engine=sentence_transformers trains criterion cross_entropy (the loss alone) or istar, "
                              f"not {name!r}")
        if name == "istar" and cfg.criterion.get("padding", "exclude") != "exclude":
            raise ConfigError("engine=sentence_transformers: criterion.padding must be exclude "
                              "(padding is never a point there)")
        task = TASKS.get(cfg.task).compose_time
        if getattr(task, "kind", None) != "regression" or getattr(task, "label_range", None) is None:
            raise ConfigError(f"engine=sentence_transformers trains sentence pairs with similarity scores (stsb), "
                              f"not task {cfg.task!r}")
        if cfg.init_from or cfg.patience:
            raise ConfigError("engine=sentence_transformers takes no init_from or patience")
        lora = cfg.model.get("lora") or {}
        given = [f"model.lora.{field.name}={lora[field.name]}" for field in fields(LoraSettings)
                 if field.name in lora and lora[field.name] != getattr(LoraSettings(), field.name)]
        if given:
            raise ConfigError(f"engine=sentence_transformers trains every weight (no LoRA); drop {', '.join(given)}")


ENGINES.declare("sentence_transformers", "istar_plugin.integrations.st_engine:SentenceTransformersEngine", None,
                SentenceTransformersSetup)
