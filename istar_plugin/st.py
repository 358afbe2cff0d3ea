"""The sentence-transformers integration under its documented name: ``from istar_plugin.st import IStarLoss`` (the
code is in :mod:`istar_plugin.integrations.st`)."""
from .integrations.st import IsotropyEvaluator, IStarLoss

__all__ = ["IStarLoss", "IsotropyEvaluator"]
