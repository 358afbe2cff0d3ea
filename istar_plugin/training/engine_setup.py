"""The built-in engine ``istar`` declared without importing torch, and :class:`EngineSetup`, its compose-time half."""
from __future__ import annotations

from omegaconf import DictConfig

from ..registry import ENGINES


class EngineSetup:
    """An engine's compose-time half: ``check_config(cfg)`` refuses what the engine cannot run."""

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        """Raise :class:`~istar_plugin.errors.ConfigError` for a config this engine cannot run (default: none)."""


ENGINES.declare("istar", "istar_plugin.training.trainer:Trainer", None, EngineSetup)
