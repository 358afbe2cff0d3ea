"""The built-in engine ``istar`` (the toolkit's :class:`~istar_plugin.training.trainer.Trainer`), declared without
importing torch, and :class:`EngineSetup`, what composing a config asks of any engine before it loads.

>>> from istar_plugin.registry import ENGINES
>>> ENGINES.get("istar").compose_time.__name__  # what composing a config checks, whether the trainer is loaded or not
'EngineSetup'
"""
from __future__ import annotations

from omegaconf import DictConfig

from ..registry import ENGINES


class EngineSetup:
    """An engine's compose-time half: ``check_config(cfg)`` refuses, in one line, what the engine cannot run."""

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        """Raise :class:`~istar_plugin.errors.ConfigError` for a config this engine cannot run (default: none)."""


ENGINES.declare("istar", "istar_plugin.training.trainer:Trainer", None, EngineSetup)
