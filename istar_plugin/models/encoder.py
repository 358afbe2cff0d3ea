"""BERT-family encoders and GPT-2-style decoders with a task head, exposing every layer's token cloud.

>>> from istar_plugin.models.encoder import HFEncoder, ModelConfig
>>> encoder = HFEncoder(ModelConfig(), kind="classification", num_labels=3)  # offline all-MiniLM-L6-v2
>>> batch = dict(encoder.tokenizer(["a short one", "a slightly longer sentence"], padding=True, return_tensors="pt"))
>>> output = encoder(batch)
>>> output.logits.shape, [cloud.shape for cloud in encoder.token_cloud(output, [0, -1])]
(torch.Size([2, 3]), [torch.Size([11, 384]), torch.Size([11, 384])])
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import warnings
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import torch
from torch import Tensor
from transformers import (AutoConfig, AutoModelForCausalLM, AutoModelForQuestionAnswering,
                          AutoModelForSequenceClassification)
from transformers.modeling_outputs import BaseModelOutputWithPast, BaseModelOutputWithPooling
from transformers.utils import logging as transformers_logging

from ..registry import MODELS
from .config import DECODER_MODEL_TYPES, ModelConfig
from .dropout import use_fast_dropout
from .frozen_backbone import FrozenBackboneCache
from .loading import load_pretrained, load_tokenizer, pad_with_eos, restoring_weights
from .lora import with_lora
from .packing import PACKED_ATTENTION, Packing, packed_inputs
from .padding_free import padding_free_choice
from .paths import PACKAGE_PREFIX, gguf_options, resolve_model_path
from .token_cloud import TokenCloudSurface, attention_mask_or_ones, padded_token_cloud, token_cloud

__all__ = ["ModelConfig", "EncoderOutput", "HFEncoder", "resolve_model_path", "gguf_options", "token_cloud",
           "padded_token_cloud", "KINDS", "restoring_weights", "PACKAGE_PREFIX", "DECODER_MODEL_TYPES"]

KINDS = ("classification", "regression", "extractive_qa", "language_modeling")
_AUTO_CLASSES = {"extractive_qa": AutoModelForQuestionAnswering, "language_modeling": AutoModelForCausalLM}
# dropout attribute names, the first of each group present in the config: BERT/ALBERT/RoBERTa, DistilBERT, GPT-2.
_DROPOUT_ATTRIBUTES = (
    ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    ("dropout", "attention_dropout"),
    ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
)


@dataclass
class EncoderOutput:
    """Head outputs, ``hidden_states`` (packed, with ``packing``, when padding-free), the head's inputs."""

    logits: Optional[Tensor]
    start_logits: Optional[Tensor]
    end_logits: Optional[Tensor]
    hidden_states: tuple[Tensor, ...]
    attention_mask: Optional[Tensor]
    representation: Optional[Tensor] = None
    inserted: dict[str, Tensor] = field(default_factory=dict)
    token_positions: Optional[Tensor] = None  # flat indices of the real tokens, when the batch brings them
    packing: Optional[Packing] = None

    @property
    def head_input(self) -> Optional[Tensor]:
        """The representation after every inserted module: what the task head consumed."""
        return next(reversed(self.inserted.values())) if self.inserted else self.representation


class _Backbone:
    """The backbone's forward, installed once: given ``head_input`` it returns that."""

    def __init__(self, forward):
        self.forward = forward

    def __call__(self, *args, head_input: Optional[Any] = None, **kwargs):
        return self.forward(*args, **kwargs) if head_input is None else head_input


def _load_config(path: str, cfg: ModelConfig, kind: str, num_labels: int, **options):
    """The pretrained config with the head size, problem type and dropout override applied."""
    overrides = {}
    if kind == "classification":
        if num_labels < 2:
            raise ValueError(f"classification needs num_labels >= 2, got {num_labels} "
                             "(use kind='regression' for one output)")
        overrides["num_labels"] = num_labels
    elif kind == "regression":
        overrides.update(num_labels=1, problem_type="regression")
    config = AutoConfig.from_pretrained(path, revision=cfg.revision, local_files_only=cfg.local_files_only, **options,
                                        **overrides)
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
class HFEncoder(TokenCloudSurface, torch.nn.Module):
    """A pretrained HF model with a fresh task head (``kind``, one of :data:`KINDS`) and its fast tokenizer."""

    def __init__(self, cfg: ModelConfig, kind: str, num_labels: int = 2):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"unknown model kind {kind!r}; choices: {', '.join(KINDS)}")
        self.kind, self.lora = kind, cfg.lora
        cfg.lora.check()
        folder, options = gguf_options(resolve_model_path(cfg.name_or_path))
        config = _load_config(folder, cfg, kind, num_labels, **options)
        if kind == "language_modeling" and config.model_type not in DECODER_MODEL_TYPES:
            raise ValueError(f"language modelling needs a decoder ({', '.join(DECODER_MODEL_TYPES)}); "
                             f"{cfg.name_or_path} is a {config.model_type} model")
        self.padding_free, self.padding_free_line = padding_free_choice(cfg.padding_free, config.model_type)
        if self.padding_free:
            options["attn_implementation"] = PACKED_ATTENTION
        model = load_pretrained(_AUTO_CLASSES.get(kind, AutoModelForSequenceClassification), folder, config=config,
                                revision=cfg.revision, local_files_only=cfg.local_files_only, **options)
        self.tokenizer = load_tokenizer(cfg)
        if self.tokenizer.pad_token is None:
            pad_with_eos(self.tokenizer)
        if model.config.pad_token_id is None:  # decoders' heads pool the last token that is not padding
            model.config.pad_token_id = self.tokenizer.pad_token_id
        if cfg.gradient_checkpointing and hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        elif cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self._accepts_token_type_ids = "token_type_ids" in inspect.signature(model.forward).parameters
        self.inserted = torch.nn.ModuleDict()  # modules between the representation and the head, in order
        self.is_decoder = model.config.model_type in DECODER_MODEL_TYPES
        self.frozen_cache: Optional[FrozenBackboneCache] = None
        self._hidden_states_wanted = True
        if kind in ("classification", "regression"):
            model.base_model.forward = _Backbone(model.base_model.forward)
        self.model = with_lora(model, cfg.lora, kind) if cfg.lora.enabled else model
        if cfg.fast_dropout:
            use_fast_dropout(self.model)

    @property
    def transformer(self) -> torch.nn.Module:
        """The Hugging Face model (inside peft's wrapper when LoRA is on)."""
        return self.model.get_base_model() if self.lora.enabled else self.model

    def forward(self, batch: dict[str, Tensor]) -> EncoderOutput:
        """The model on ``input_ids``, ``attention_mask`` (none: no padding) and ``token_type_ids``."""
        if "input_ids" not in batch:
            raise KeyError(f"batch needs 'input_ids'; got keys {sorted(batch)}")
        attention_mask = attention_mask_or_ones(batch)
        inputs = {"input_ids": batch["input_ids"], "attention_mask": attention_mask}
        if self._accepts_token_type_ids and batch.get("token_type_ids") is not None:
            inputs["token_type_ids"] = batch["token_type_ids"]
        representation, inserted, packing = None, {}, None
        if self.kind in ("classification", "regression") and (self.padding_free or not self.is_decoder):
            out, hidden_states, representation, inserted, packing = self._classify(inputs, batch)
        elif self.padding_free:  # the Hugging Face model itself, LoRA's layers in it
            packed, packing = self.pack(inputs, batch.get("token_positions"), batch.get("sequence_lengths"))
            out = _token_outputs_unpacked(self.transformer(**packed, output_hidden_states=True), packing)
            hidden_states = tuple(hidden[0] for hidden in out.hidden_states)
        else:  # the Hugging Face model itself, LoRA's layers in it (peft's QA wrapper drops token_type_ids)
            out = self.transformer(**inputs, output_hidden_states=True)
            hidden_states = tuple(out.hidden_states or ())
        packed = packing is not None
        return EncoderOutput(
            logits=getattr(out, "logits", None),
            start_logits=_no_answer_in_padding(getattr(out, "start_logits", None), attention_mask),
            end_logits=_no_answer_in_padding(getattr(out, "end_logits", None), attention_mask),
            hidden_states=hidden_states, attention_mask=None if packed else attention_mask,
            representation=representation, inserted=inserted,
            token_positions=None if packed else batch.get("token_positions"), packing=packing,
        )

    def pack(self, inputs: dict[str, Tensor], positions: Optional[Tensor] = None,
             lengths: Optional[Sequence[int]] = None) -> tuple[dict[str, Any], Packing]:
        """:func:`~.packing.packed_inputs` for this model."""
        return packed_inputs(inputs, self.transformer.config, positions, lengths)

    def _classify(self, inputs: dict[str, Tensor], batch: dict[str, Any]):
        """A sequence head's output, hidden states, representation, inserted outputs and packing."""
        cache, hidden_states, packing, states = self.frozen_cache, (), None, None
        if cache is not None and (self.training or not self._hidden_states_wanted):
            keys = cache.keys(inputs)
            if missing := cache.missing(keys):  # the backbone on them (their packed row when padding-free)
                with torch.no_grad():
                    _, vectors, pooled, _ = self._backbone_on({name: row[missing] for name, row in inputs.items()}, {})
                cache.store([keys[i] for i in missing], vectors, pooled)
            representation, pooled = cache.lookup(keys).to(inputs["input_ids"].device), cache.pooled
        else:
            states, representation, pooled, packing = self._backbone_on(inputs, batch)
            hidden_states = tuple(hidden if packing is None else hidden[0] for hidden in states.hidden_states)
            if cache is not None:  # an evaluation pass fills the cache as it goes
                cache.store(cache.keys(inputs), representation, pooled)
        inserted, current = {}, representation
        for name, module in self.inserted.items():
            current = inserted[name] = module(current)
        if states is not None and packing is None:  # padded: the backbone's output, the head's input replaced
            standin = states
            if pooled:
                standin.pooler_output = current
            elif inserted:
                rest = states.last_hidden_state[:, 1:]
                standin.last_hidden_state = torch.cat([current.unsqueeze(1).to(rest.dtype), rest], dim=1)
        elif self.is_decoder:
            standin = BaseModelOutputWithPast(last_hidden_state=current.unsqueeze(1))
        else:
            standin = BaseModelOutputWithPooling(last_hidden_state=current.unsqueeze(1),
                                                 pooler_output=current if pooled else None)
        out = self.model(input_ids=inputs["input_ids"][:, :1], attention_mask=inputs["attention_mask"][:, :1],
                         head_input=standin)
        return out, hidden_states, None if self.is_decoder else representation, inserted, packing

    def _backbone_on(self, inputs: dict[str, Tensor], batch: dict[str, Any]):
        """The backbone's output, the vector per sequence its head reads, whether it is pooled, and the packing."""
        backbone = self.transformer.base_model
        if not self.padding_free:
            states = backbone(**inputs, output_hidden_states=True)
            pooled = getattr(states, "pooler_output", None)
            vectors = pooled if pooled is not None else states.last_hidden_state[:, 0]
            return states, vectors, pooled is not None, None
        packed, packing = self.pack(inputs, batch.get("token_positions"), batch.get("sequence_lengths"))
        states = backbone(**packed, output_hidden_states=True)
        rows = states.last_hidden_state[0].index_select(0, packing.last if self.is_decoder else packing.first)
        pooler = getattr(backbone, "pooler", None)
        if pooler is None or self.is_decoder:
            return states, rows, False, packing
        activation = getattr(backbone, "pooler_activation", None)  # BERT's pooler reads position 0; ALBERT's is linear
        pooled = pooler(rows.unsqueeze(1)) if activation is None else activation(pooler(rows))
        return states, pooled, True, packing

    def keep_padding(self, reason: str) -> None:
        """Compute on padded batches after all, ``reason`` going into :attr:`padding_free_line`."""
        if self.padding_free:
            self.padding_free, self.padding_free_line = False, f"model.padding_free=auto: padded batches ({reason})"
            self.transformer.set_attn_implementation("sdpa")

    def cache_frozen_backbone(self, spill_dir: Optional[str | PathLike] = None) -> bool:
        """Cache the backbone's outputs per example if nothing in it trains; whether it does."""
        if (self.kind not in ("classification", "regression") or self.is_decoder
                or any(parameter.requires_grad for parameter in self.transformer.base_model.parameters())):
            return False
        self.frozen_cache = FrozenBackboneCache(spill_dir=spill_dir)
        self.transformer.base_model.eval()
        return True

    @contextlib.contextmanager
    def head_only(self) -> Iterator[None]:
        """Forward passes inside need no hidden states: a cached frozen backbone serves them in evaluation too."""
        self._hidden_states_wanted = False
        try:
            yield
        finally:
            self._hidden_states_wanted = True

    def train(self, mode: bool = True) -> "HFEncoder":
        super().train(mode)
        if self.frozen_cache is not None:
            self.transformer.base_model.eval()  # a cached backbone has no dropout
        return self

    def insert_before_head(self, name: str, module: torch.nn.Module) -> None:
        """Insert ``module`` ((batch, hidden) -> (batch, hidden)) after the representation and earlier inserts."""
        if self.kind not in ("classification", "regression"):
            raise ValueError(f"cannot insert {name!r} before the head: an {self.kind} head reads every token, "
                             "not one representation per example; use a classification or regression task")
        if self.is_decoder:
            raise ValueError(f"cannot insert {name!r} before the head of a decoder "
                             f"({self.transformer.config.model_type}): its head reads the last real token of every "
                             "sequence; use an encoder (e.g. model=minilm)")
        if name in self.inserted:
            raise ValueError(f"a module named {name!r} is already inserted before the head")
        self.inserted[name] = module

    def save_pretrained(self, directory: str | PathLike, id2label: Optional[dict] = None,
                        label2id: Optional[dict] = None) -> None:
        """Write model and tokenizer to ``directory`` as a Hugging Face folder; refused with inserted modules."""
        if len(self.inserted):
            raise ValueError(f"cannot save as a Hugging Face model: modules {', '.join(self.inserted)} are inserted "
                             "before the head and HF has no place for them; use the run's checkpoint instead")
        if id2label is not None:
            self.transformer.config.id2label, self.transformer.config.label2id = dict(id2label), dict(label2id or {})
        bars = transformers_logging.is_progress_bar_enabled()
        transformers_logging.disable_progress_bar()  # a run's log gets no "Writing model shards" bar
        try:
            with warnings.catch_warnings():  # peft looks for a config.json beside a GGUF file, finds none, says so
                warnings.filterwarnings("ignore", message="Could not find a config file")
                self.model.save_pretrained(directory)  # with LoRA: the adapter and the head, in peft's format
            if self.lora.enabled and self.lora.save_merged:
                copy.deepcopy(self.model).merge_and_unload().save_pretrained(Path(directory) / "merged")
                self.tokenizer.save_pretrained(Path(directory) / "merged")
        finally:
            if bars:
                transformers_logging.enable_progress_bar()
        self.tokenizer.save_pretrained(directory)

    def checkpoint_state(self) -> dict[str, Tensor]:
        """What a checkpoint holds: every tensor, or with LoRA the trainable ones alone."""
        state = self.state_dict()
        if not self.lora.enabled:
            return state
        trainable = {name for name, parameter in self.named_parameters() if parameter.requires_grad}
        return {name: tensor for name, tensor in state.items() if name in trainable}

    def load_checkpoint_state(self, state: dict[str, Tensor]) -> None:
        """Load :meth:`checkpoint_state`; with LoRA every trainable tensor must be in ``state`` and nothing else."""
        if not self.lora.enabled:
            self.load_state_dict(state)
            return
        trainable = {name for name, parameter in self.named_parameters() if parameter.requires_grad}
        absent, foreign = sorted(trainable - set(state)), sorted(set(state) - trainable)
        if absent or foreign:
            raise ValueError(f"the checkpoint does not fit this LoRA model (model.lora must match the run's): "
                             f"{len(absent)} adapter tensor(s) missing (e.g. {absent[:1]}), {len(foreign)} unexpected "
                             f"(e.g. {foreign[:1]})")
        self.load_state_dict(state, strict=False)


def _token_outputs_unpacked(out: Any, packing: Packing) -> Any:
    """A per-token head's output on the packed row as the loss reads it: span logits padded, LM logits packed."""
    if getattr(out, "start_logits", None) is not None:
        out.start_logits, out.end_logits = packing.unpack(out.start_logits[0]), packing.unpack(out.end_logits[0])
    else:
        out.logits = out.logits[0]
    return out


def _no_answer_in_padding(span_logits: Optional[Tensor], attention_mask: Tensor) -> Optional[Tensor]:
    if span_logits is None:
        return None
    return span_logits.masked_fill(~attention_mask.bool(), torch.finfo(span_logits.dtype).min)
