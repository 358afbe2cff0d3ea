"""``model.padding_free``: which runs compute on real tokens only (each batch's sequences packed into one row), and
the one line that says why a run cannot (no torch needed: compose time asks it too).

>>> padding_free_choice("auto", "bert")  # model.padding_free=true arrives as True
(True, None)
>>> padding_free_choice("auto", "t5")[1]
'model.padding_free=auto: padded batches (model family t5 has no padding-free forward here; families that have: \
bert, roberta, distilbert, albert, gpt2, llama)'
"""
from __future__ import annotations

from typing import Optional, Union

from ..errors import ConfigError

PADDING_FREE_CHOICES = ("auto", True, False)  # as the command line's true and false arrive
PADDING_FREE_FAMILIES = ("bert", "roberta", "distilbert", "albert", "gpt2", "llama")  # each in test_padding_free.py
INCLUDED_PADDING = "criterion.padding=include scores the padded positions too"
ROBERTA_FAMILY = ("roberta", "xlm-roberta", "camembert", "longformer")  # positions start after the padding index


def position_offset(config) -> int:
    """The position of a sequence's first token: after the padding index in RoBERTa's family, else 0."""
    return (config.pad_token_id or 0) + 1 if config.model_type in ROBERTA_FAMILY else 0


def padding_free_choice(setting: Union[bool, str], model_type: Optional[str],
                        included_padding: bool = False) -> tuple[bool, Optional[str]]:
    """(whether batches are packed, the line a run prints when ``auto`` falls back to padded batches)."""
    if setting not in PADDING_FREE_CHOICES:
        raise ConfigError(f"model.padding_free={setting!r} unknown; choose one of: auto, true, false")
    if setting is False:
        return False, None
    obstacle = INCLUDED_PADDING if included_padding else None
    if model_type is not None and model_type not in PADDING_FREE_FAMILIES:
        obstacle = (f"model family {model_type} has no padding-free forward here; families that have: "
                    f"{', '.join(PADDING_FREE_FAMILIES)}")
    if obstacle is None:
        return True, None
    if setting is True:
        raise ConfigError(f"model.padding_free=true: {obstacle}; use model.padding_free=auto or false")
    return False, f"model.padding_free=auto: padded batches ({obstacle})"
