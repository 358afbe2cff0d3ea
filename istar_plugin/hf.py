"""The ``transformers.Trainer`` integration under its documented name: ``from istar_plugin.hf import IStarTrainer``.

The code lives in :mod:`istar_plugin.integrations.hf`; this module keeps the public import path.
"""
from .integrations.hf import HFModelView, IStarTrainer, model_kind

__all__ = ["HFModelView", "IStarTrainer", "model_kind"]
