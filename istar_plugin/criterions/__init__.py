"""Training objectives, one module per method family, each a pure function plus a registered class.

A criterion is called as ``criterion(model, output, batch) -> CriterionOutput`` where ``model`` is the
(unwrapped) adapter, ``output`` its :class:`~istar_plugin.models.EncoderOutput` and ``batch`` the tensors;
it may change the model through ``adapt(model)`` (see :class:`~.task.Criterion`).
Importing this package registers the built-in criterions: ``cross_entropy`` (:mod:`.task`), ``cosreg``
(:mod:`.cosreg`) and ``istar`` (:mod:`.istar`).
"""
from .cosreg import CosRegConfig, CosRegCriterion, cosreg_loss
from .istar import IStarConfig, IStarCriterion, istar_loss
from .task import Criterion, CriterionOutput, CrossEntropyConfig, CrossEntropyCriterion, task_loss

__all__ = [
    "Criterion",
    "CriterionOutput",
    "task_loss",
    "cosreg_loss",
    "istar_loss",
    "CrossEntropyConfig",
    "CrossEntropyCriterion",
    "CosRegConfig",
    "CosRegCriterion",
    "IStarConfig",
    "IStarCriterion",
]
