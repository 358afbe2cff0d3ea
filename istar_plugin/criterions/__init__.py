"""Training objectives, one module per method family, each a pure function plus a registered class.

A criterion is called as ``criterion(model, output, batch) -> CriterionOutput`` where ``model`` is the
(unwrapped) adapter, ``output`` its :class:`~istar_plugin.models.EncoderOutput` and ``batch`` the tensors;
it may change the model through ``adapt(model)`` (see :class:`~.task.Criterion`).
Importing this package declares the built-in criterions without importing torch: ``cross_entropy`` (:mod:`.task`),
``cosreg`` (:mod:`.cosreg`), ``istar`` (:mod:`.istar`), ``spectrum`` (:mod:`.spectrum`), ``flow`` (:mod:`.flow`) and
``isolayer`` (:mod:`.isolayer`); their configs and compose-time checks are in :mod:`.configs`, and each module
loads the first time its class (or one of the public names below) is asked for.

>>> from istar_plugin.registry import CRITERIONS
>>> CRITERIONS.get("istar").config_cls is IStarConfig
True
"""
from importlib import import_module
from typing import Any

from ..registry import CRITERIONS
from .configs import (
    CosRegConfig,
    CosRegSetup,
    CriterionSetup,
    CrossEntropyConfig,
    FlowConfig,
    FlowSetup,
    IsoLayerConfig,
    IsoLayerSetup,
    IStarConfig,
    SpectrumConfig,
    SpectrumSetup,
)

_LAZY = {
    "task": ("Criterion", "CriterionOutput", "CrossEntropyCriterion", "next_token_nll", "task_loss"),
    "cosreg": ("CosRegCriterion", "cosreg_loss", "embedding_cosine"),
    "flow": ("FlowCriterion", "Glow"),
    "isolayer": ("IsoLayerCriterion", "balanced_joint_loss", "isotropy_loss"),
    "istar": ("IStarCriterion", "istar_loss"),
    "spectrum": ("SpectrumCriterion", "spectrum_penalty", "spectrum_targets"),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}

__all__ = ["CrossEntropyConfig", "CosRegConfig", "IStarConfig", "SpectrumConfig", "FlowConfig", "IsoLayerConfig",
           *_MODULE_OF]

for _name, _target, _config, _setup in (
    ("cross_entropy", "task:CrossEntropyCriterion", CrossEntropyConfig, None),
    ("cosreg", "cosreg:CosRegCriterion", CosRegConfig, CosRegSetup),
    ("istar", "istar:IStarCriterion", IStarConfig, None),
    ("spectrum", "spectrum:SpectrumCriterion", SpectrumConfig, SpectrumSetup),
    ("flow", "flow:FlowCriterion", FlowConfig, FlowSetup),
    ("isolayer", "isolayer:IsoLayerCriterion", IsoLayerConfig, IsoLayerSetup),
):
    CRITERIONS.declare(_name, f"{__name__}.{_target}", _config, _setup or CriterionSetup)
del _name, _target, _config, _setup


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(import_module(f".{_MODULE_OF[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
