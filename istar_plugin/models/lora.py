"""LoRA adapters (peft) on a pretrained model's linear layers: the layers they can target, the wrap.

>>> from transformers import BertConfig, BertModel
>>> bert = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64))
>>> lora_target_choices(bert)
['dense', 'key', 'query', 'value']
"""
from __future__ import annotations

import warnings

import torch
from transformers.pytorch_utils import Conv1D

from ..errors import ConfigError, one_line
from .config import LoraSettings

_PEFT_TASK_TYPES = {"classification": "SEQ_CLS", "regression": "SEQ_CLS", "extractive_qa": "QUESTION_ANS",
                    "language_modeling": "CAUSAL_LM"}


def lora_target_choices(model: torch.nn.Module) -> list[str]:
    """The names LoRA can target in ``model``: its linear layers' last name parts, the task head's excepted."""
    head = {"classifier", "score", "qa_outputs", "pre_classifier", "lm_head"}
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, (torch.nn.Linear, Conv1D)) and not head & set(name.split("."))})


def check_targets(model: torch.nn.Module, settings: LoraSettings) -> None:
    """A one-line ConfigError for a target that is not a linear layer of ``model`` (naming the choices)."""
    choices = lora_target_choices(model)
    for name in settings.target_modules or []:
        if name not in choices:
            raise ConfigError(f"model.lora.target_modules: {name!r} is not a linear layer of {type(model).__name__}; "
                              f"choices: {', '.join(choices)}")


def with_lora(model: torch.nn.Module, settings: LoraSettings, kind: str) -> torch.nn.Module:
    """``model`` wrapped by peft with LoRA adapters (its task head trains whole)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ModuleNotFoundError:
        raise ConfigError("model.lora.r > 0 needs peft: pip install peft") from None
    check_targets(model, settings)
    config = LoraConfig(task_type=_PEFT_TASK_TYPES[kind], r=settings.r, lora_alpha=settings.alpha,
                        lora_dropout=settings.dropout, target_modules=settings.target_modules)
    try:
        with warnings.catch_warnings():  # peft asks transformers' deprecated is_gradient_checkpointing
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            return get_peft_model(model, config)
    except ValueError as error:  # no default targets for this family
        raise ConfigError(f"model.lora.target_modules: {one_line(error)[:200]}; name them, choices: "
                          f"{', '.join(lora_target_choices(model))}") from None
