"""The ``transformers.Trainer`` integration under its documented name: ``from istar_plugin.hf import IStarTrainer``
(the code is in :mod:`istar_plugin.integrations.hf`)."""
from .integrations.hf import HFModelView, IStarTrainer, model_kind

__all__ = ["HFModelView", "IStarTrainer", "model_kind"]
