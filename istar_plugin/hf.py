"""The ``transformers.Trainer`` integration (:mod:`istar_plugin.integrations.hf`) under its documented name."""
from .integrations.hf import HFModelView, IStarTrainer, model_kind

__all__ = ["HFModelView", "IStarTrainer", "model_kind"]
