"""Padding-free batches in sentence-transformers (the code lives in :mod:`istar_plugin.models.st_padding_free`)."""
from ..models.st_padding_free import PACKED_HIDDEN_STATES, PaddingFreeForward, make_padding_free, transformer_module

__all__ = ["PACKED_HIDDEN_STATES", "PaddingFreeForward", "make_padding_free", "transformer_module"]
