"""Padding-free batches in sentence-transformers: a ``SentenceTransformer``'s Transformer module computes each batch
as one packed row, its outputs put back at their padded places."""
from __future__ import annotations

from typing import Any, Optional, Union

from torch import nn

from .packing import PACKED_ATTENTION, packed_inputs
from .padding_free import padding_free_choice

PACKED_HIDDEN_STATES = "packed_hidden_states"
"""The features key of a padding-free forward's hidden states as computed: (1, real tokens, d) each."""


def transformer_module(model: nn.Module) -> nn.Module:
    """The model's transformer module: the one holding the Hugging Face model (``auto_model``)."""
    for module in model.modules():
        if hasattr(module, "auto_model") and hasattr(module.auto_model, "config"):
            return module
    raise TypeError(f"{type(model).__name__} has no transformer module (auto_model) to take token embeddings from")


class PaddingFreeForward:
    """A Transformer module's forward on the packed row of each padded batch; a batch without a mask runs its own."""

    def __init__(self, transformer: nn.Module):
        self.transformer, self.padded_forward = transformer, transformer.forward

    def __call__(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        if features.get("attention_mask") is None:
            return self.padded_forward(features, **kwargs)
        packed, packing = packed_inputs(features, self.transformer.auto_model.config)
        packed = self.padded_forward(packed, **kwargs)  # the cumulative lengths reach the packed attention
        name = self.transformer.module_output_name
        features[name] = packing.unpack(packed[name][0])
        if "all_layer_embeddings" in packed:
            states = packed["all_layer_embeddings"]
            features[PACKED_HIDDEN_STATES] = states
            features["all_layer_embeddings"] = tuple(packing.unpack(state[0]) for state in states)
        return features


def make_padding_free(model: nn.Module, setting: Union[bool, str]) -> tuple[bool, Optional[str]]:
    """Make ``model`` compute padding-free where ``setting`` and its family allow; (packed, ``auto``'s line)."""
    transformer = transformer_module(model)
    packed, line = padding_free_choice(setting, transformer.auto_model.config.model_type)
    if packed:
        transformer.auto_model.set_attn_implementation(PACKED_ATTENTION)
        transformer.forward = PaddingFreeForward(transformer)
    return packed, line
