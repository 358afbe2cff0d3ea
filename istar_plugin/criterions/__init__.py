"""Training objectives, one module per method family, each importing torch only when a loss is computed."""
from importlib import import_module
from typing import Any

from .cosreg import CosRegConfig, CosRegCriterion, cosreg_loss, embedding_cosine
from .flow import FlowConfig, FlowCriterion
from .isolayer import IsoLayerConfig, IsoLayerCriterion, balanced_joint_loss, isotropy_loss
from .istar import IStarConfig, IStarCriterion, istar_loss
from .spectrum import SpectrumConfig, SpectrumCriterion, spectrum_penalty, spectrum_targets
from .task import Criterion, CriterionOutput, CrossEntropyConfig, CrossEntropyCriterion, next_token_nll, task_loss

__all__ = ["CrossEntropyConfig", "CosRegConfig", "IStarConfig", "SpectrumConfig", "FlowConfig", "IsoLayerConfig",
           "Criterion", "CriterionOutput", "CrossEntropyCriterion", "next_token_nll", "task_loss", "CosRegCriterion",
           "cosreg_loss", "embedding_cosine", "FlowCriterion", "Glow", "IsoLayerCriterion", "balanced_joint_loss",
           "isotropy_loss", "IStarCriterion", "istar_loss", "SpectrumCriterion", "spectrum_penalty",
           "spectrum_targets"]


def __getattr__(name: str) -> Any:
    if name == "Glow":  # a torch module: imported when asked for
        return import_module(".modules", __name__).Glow
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
