"""The sentence-transformers integration (:mod:`istar_plugin.integrations.st`) under its documented name."""
from .integrations.st import IsotropyEvaluator, IStarLoss

__all__ = ["IStarLoss", "IsotropyEvaluator"]
