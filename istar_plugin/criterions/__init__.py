"""Training objectives, one module per method family, each a pure function plus a registered class.

A criterion is called as ``criterion(model, output, batch) -> CriterionOutput`` where ``model`` is the
(unwrapped) adapter, ``output`` its :class:`~istar_plugin.models.EncoderOutput` and ``batch`` the tensors;
it may change the model through ``adapt(model)`` (see :class:`~.task.Criterion`).
Importing this package registers the built-in criterions: ``cross_entropy`` (:mod:`.task`), ``cosreg``
(:mod:`.cosreg`), ``istar`` (:mod:`.istar`), ``spectrum`` (:mod:`.spectrum`), ``flow`` (:mod:`.flow`) and ``isolayer`` (:mod:`.isolayer`).
"""
from .cosreg import CosRegConfig, CosRegCriterion, cosreg_loss, embedding_cosine
from .flow import FlowConfig, FlowCriterion, Glow
from .isolayer import IsoLayerConfig, IsoLayerCriterion, balanced_joint_loss, isotropy_loss
from .istar import IStarConfig, IStarCriterion, istar_loss
from .spectrum import SpectrumConfig, SpectrumCriterion, spectrum_penalty, spectrum_targets
from .task import Criterion, CriterionOutput, CrossEntropyConfig, CrossEntropyCriterion, next_token_nll, task_loss

__all__ = [
    "Criterion",
    "CriterionOutput",
    "task_loss",
    "next_token_nll",
    "cosreg_loss",
    "istar_loss",
    "embedding_cosine",
    "spectrum_penalty",
    "spectrum_targets",
    "Glow",
    "CrossEntropyConfig",
    "CrossEntropyCriterion",
    "CosRegConfig",
    "CosRegCriterion",
    "IStarConfig",
    "IStarCriterion",
    "SpectrumConfig",
    "SpectrumCriterion",
    "FlowConfig",
    "FlowCriterion",
    "balanced_joint_loss",
    "isotropy_loss",
    "IsoLayerConfig",
    "IsoLayerCriterion",
]
