"""The sentence-transformers integration under its documented name: ``from istar_plugin.st import IStarLoss``.

The code lives in :mod:`istar_plugin.integrations.st`; this module keeps the public import path.
"""
from .integrations.st import IsotropyEvaluator, IStarLoss

__all__ = ["IStarLoss", "IsotropyEvaluator"]
