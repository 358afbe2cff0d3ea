"""BERT-family encoders and GPT-2-style decoders with a task head, exposing every layer's token cloud for
isotropy regularisers. Decoders classify from their last real token (padded with end-of-text); with
``kind="language_modeling"`` they keep their language-model head (logits over the vocabulary at every token).

>>> from istar_plugin.models.encoder import HFEncoder, ModelConfig
>>> encoder = HFEncoder(ModelConfig(), kind="classification", num_labels=3)  # offline all-MiniLM-L6-v2
>>> batch = dict(encoder.tokenizer(["a short one", "a slightly longer sentence"], padding=True, return_tensors="pt"))
>>> output = encoder(batch)
>>> output.logits.shape, [cloud.shape for cloud in encoder.token_cloud(output, [0, -1])]
(torch.Size([2, 3]), [torch.Size([11, 384]), torch.Size([11, 384])])

Changing the model (the adapter mechanism): :meth:`HFEncoder.insert_before_head` puts a module between
the representation the task head consumes (``output.representation``: BERT/ALBERT's pooled [CLS], the
[CLS] state for RoBERTa/DistilBERT) and the head, for training and evaluation alike; the module is a
submodule (its parameters are in ``state_dict()``, checkpoints, ``.to()`` and DDP) and each inserted
module's output is in ``output.inserted``. Freezing is plain torch: the trainer's optimizer takes only the
parameters that require gradients. A criterion does this in its ``adapt(model)`` hook.

>>> layer = torch.nn.Linear(384, 384)
>>> with torch.no_grad():
...     _ = layer.weight.copy_(torch.eye(384)), layer.bias.zero_()
>>> encoder.insert_before_head("isolayer", layer)
>>> _ = encoder.requires_grad_(False), layer.requires_grad_(True)  # train the inserted layer alone
>>> inserted = encoder(batch)
>>> (inserted.representation.shape, inserted.inserted["isolayer"].shape,
...  inserted.head_input is inserted.inserted["isolayer"])
(torch.Size([2, 384]), torch.Size([2, 384]), True)
>>> torch.allclose(inserted.logits, output.logits, atol=1e-6)  # an identity layer: the same logits
True
>>> sorted(name for name, p in encoder.named_parameters() if p.requires_grad)
['inserted.isolayer.bias', 'inserted.isolayer.weight']
"""
from __future__ import annotations

import contextlib
import contextvars
import copy
import inspect
import sys
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
from .frozen_backbone import FrozenBackboneCache, standin_output
from .config import DECODER_MODEL_TYPES, ModelConfig
from .lora import with_lora
from .packed_heads import pooled_first_tokens, token_outputs_unpacked
from .packing import PACKED_ATTENTION, Packing
from .padding_free import padding_free_choice
from .paths import PACKAGE_PREFIX, gguf_options, resolve_model_path
from .preflight import ROBERTA_FAMILY
from .tokenizer import load_tokenizer
from .token_cloud import TokenCloudSurface, attention_mask_or_ones, padded_token_cloud, token_cloud
from .weight_files import SafetensorError, damaged_weights

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
    """Head outputs and the HF ``hidden_states`` tuple (index 0 = embedding output, 1..L = transformer layers).

    A padding-free forward (:attr:`HFEncoder.padding_free`) gives each hidden state packed, (real tokens, hidden),
    no ``attention_mask`` (every position is a token) and its ``packing`` (where each token sits in the padded
    batch); a language model's ``logits`` are packed too, (real tokens, vocabulary). Extractive QA's
    ``start_logits``/``end_logits`` are (batch, length) either way, at the dtype's lowest value on the padding (no
    answer starts or ends there).

    ``representation``: the (batch, hidden) vector per example that the task head consumes, before any
    inserted module (None for extractive QA, whose head reads every token). ``inserted``: each inserted
    module's output, in insertion order; ``head_input`` is what the head actually received.
    """

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
    """A pretrained HF encoder with a fresh task head and its fast tokenizer; ``kind`` is one of :data:`KINDS`."""

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
        auto_class = _AUTO_CLASSES.get(kind, AutoModelForSequenceClassification)
        model = _load_with_one_line_report(
            auto_class, folder, config=config, revision=cfg.revision, local_files_only=cfg.local_files_only, **options
        )
        self.tokenizer = load_tokenizer(cfg)
        if self.tokenizer.pad_token is None:
            _use_eos_as_padding(self.tokenizer)
        if model.config.pad_token_id is None:  # decoders' heads pool the last token that is not padding
            model.config.pad_token_id = self.tokenizer.pad_token_id
        if cfg.gradient_checkpointing:
            _enable_activation_checkpointing(model)
        self._accepts_token_type_ids = "token_type_ids" in inspect.signature(model.forward).parameters
        # padding-free: a batch's real tokens in one row (models/packing.py); its line says why auto could not
        self.padding_free, self.padding_free_line = padding_free_choice(cfg.padding_free, config.model_type)
        self._padded_attention = model.config._attn_implementation
        if self.padding_free:
            model.config._attn_implementation = PACKED_ATTENTION
        self._position_offset = (model.config.pad_token_id or 0) + 1 if config.model_type in ROBERTA_FAMILY else 0
        self._packed_pass = False
        self.inserted = torch.nn.ModuleDict()  # modules between the representation and the head, in order
        self._head_site: dict[str, Any] = {}  # what the last forward saw at the head's input
        self.is_decoder = model.config.model_type in DECODER_MODEL_TYPES
        self.frozen_cache: Optional[FrozenBackboneCache] = None
        self._hidden_states_wanted = True
        if kind in ("classification", "regression") and not self.is_decoder:
            model.base_model.register_forward_hook(self._at_head_input)
        self.model = with_lora(model, cfg.lora, kind) if cfg.lora.enabled else model

    @property
    def transformer(self) -> torch.nn.Module:
        """The Hugging Face model (inside peft's wrapper when LoRA is on)."""
        return self.model.get_base_model() if self.lora.enabled else self.model

    def forward(self, batch: dict[str, Tensor]) -> EncoderOutput:
        """Run the model on ``input_ids``/``attention_mask`` (+ ``token_type_ids`` if the model takes them).

        Other keys (e.g. labels) are ignored: criterions compute the losses. A missing attention mask means no padding.
        """
        if "input_ids" not in batch:
            raise KeyError(f"batch needs 'input_ids'; got keys {sorted(batch)}")
        attention_mask = attention_mask_or_ones(batch)
        inputs = {"input_ids": batch["input_ids"], "attention_mask": attention_mask}
        if self._accepts_token_type_ids and batch.get("token_type_ids") is not None:
            inputs["token_type_ids"] = batch["token_type_ids"]
        self._head_site = {}
        hidden_states, packing = None, None
        from_cache = self.frozen_cache is not None and (self.training or not self._hidden_states_wanted)
        if from_cache:
            out = self._forward_from_cache(inputs)
        elif self.padding_free:
            out, hidden_states, packing = self._forward_packed(inputs, batch)
        else:  # the Hugging Face model itself, LoRA's layers in it: peft's QA wrapper drops token_type_ids
            out = self.transformer(**inputs, output_hidden_states=True)
        if self.frozen_cache is not None and not from_cache:  # an evaluation pass fills the cache as it goes
            keys = self.frozen_cache.keys(inputs)
            missing = self.frozen_cache.missing(keys)
            site = self._head_site
            self.frozen_cache.remember(keys, missing, site["representation"][missing], site["pooled"])
        site, self._head_site = self._head_site, {}
        packed = packing is not None
        return EncoderOutput(
            logits=getattr(out, "logits", None),
            start_logits=_no_answer_in_padding(getattr(out, "start_logits", None), attention_mask),
            end_logits=_no_answer_in_padding(getattr(out, "end_logits", None), attention_mask),
            hidden_states=tuple(out.hidden_states or ()) if hidden_states is None else hidden_states,
            attention_mask=None if packed else attention_mask,
            representation=site.get("representation"),
            inserted=site.get("inserted", {}),
            token_positions=None if packed else batch.get("token_positions"),
            packing=packing,
        )

    def _forward_packed(self, inputs: dict[str, Tensor], batch: dict[str, Any]) -> tuple[Any, tuple, Packing]:
        """The model's forward on the batch's real tokens alone: one packed row (per-sequence positions, attention
        confined to each sequence, causal within each for decoders). A head that reads every token (extractive QA's
        span head, a language model's) runs on the packed row with the rest of the Hugging Face model (called
        itself, its LoRA layers in it: peft's question-answering wrapper drops ``position_ids``); one that reads one
        token per example reads it from the packed row (:meth:`_head_on_each_sequence`); the collator's token
        positions and lengths, when ``batch`` has them, spare host syncs. Returns the head's output, the packed
        hidden states, (tokens, hidden) each, and the packing."""
        packed, packing = self.pack(inputs, batch.get("token_positions"), batch.get("sequence_lengths"))
        if self.kind in ("extractive_qa", "language_modeling"):
            out = states = token_outputs_unpacked(self.transformer(**packed, output_hidden_states=True), packing)
        else:
            out, states = self._head_on_each_sequence(inputs, packed, packing)
        return out, tuple(hidden[0] for hidden in states.hidden_states), packing

    def pack(self, inputs: dict[str, Tensor], positions: Optional[Tensor] = None,
             lengths: Optional[Sequence[int]] = None) -> tuple[dict[str, Any], Packing]:
        """A padded batch's inputs as the packed row this model's forward takes (RoBERTa's positions after its padding
        index), and their packing; ``positions`` (real tokens' flat indices), ``lengths``: when the host knows them."""
        packing = Packing.of(inputs["attention_mask"], positions, lengths)
        return packing.model_inputs(inputs, self._position_offset), packing

    def _head_on_each_sequence(self, inputs: dict[str, Tensor], packed: dict[str, Any], packing: Packing
                               ) -> tuple[Any, Any]:
        """The backbone on the packed row, then the task head on each sequence's first token (an encoder's [CLS],
        through its pooler when it has one) or last real token (a decoder's), as the head reads them from a padded
        batch. Returns the head's output and the backbone's."""
        backbone = self.transformer.base_model
        self._packed_pass = True  # the head's input is not this pass's output: the hook waits for the stand-in's
        try:
            states = backbone(**packed, output_hidden_states=True)
        finally:
            self._packed_pass = False
        rows = states.last_hidden_state[0].index_select(0, packing.last if self.is_decoder else packing.first)
        if self.is_decoder:
            standin = BaseModelOutputWithPast(last_hidden_state=rows.unsqueeze(1))
        else:
            standin = BaseModelOutputWithPooling(last_hidden_state=rows.unsqueeze(1),
                                                 pooler_output=pooled_first_tokens(backbone, rows))
        backbone.forward = lambda *args, **kwargs: standin  # the head reads it; the hook at its input still runs
        try:
            out = self.model(input_ids=inputs["input_ids"][:, :1], attention_mask=inputs["attention_mask"][:, :1])
        finally:
            del backbone.forward
        return out, states

    def keep_padding(self, reason: str) -> None:
        """Compute on padded batches after all (e.g. the criterion scores the padded positions too): ``reason`` goes
        into :attr:`padding_free_line` when the model was to pack them."""
        if self.padding_free:
            self.padding_free, self.padding_free_line = False, f"model.padding_free=auto: padded batches ({reason})"
            self.transformer.config._attn_implementation = self._padded_attention

    def cache_frozen_backbone(self, spill_dir: Optional[str | PathLike] = None) -> bool:
        """Compute the backbone's outputs once per example from now on, in training too, if nothing in it trains.

        Returns whether the cache is on. The backbone then runs without dropout (as in evaluation), and a
        training forward (or one inside :meth:`head_only`) brings no hidden states (``hidden_states == ()``):
        only the head and the modules inserted before it run. Other evaluation passes run the whole model and
        fill the cache as they go. A large cache moves to an unnamed file in ``spill_dir``
        (:class:`~.frozen_backbone.FrozenBackboneCache`).
        """
        if self.kind not in ("classification", "regression") or self.is_decoder:
            return False
        if any(parameter.requires_grad for parameter in self.transformer.base_model.parameters()):
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

    def _forward_from_cache(self, inputs: dict[str, Tensor]):
        """The model's forward with the backbone's part looked up (computed for the examples seen first here)."""
        cache, backbone = self.frozen_cache, self.transformer.base_model
        keys = cache.keys(inputs)
        missing = cache.missing(keys)
        if missing:  # the backbone on them (their packed row when padding-free): the hook records the head's input
            rows = {name: tensor[missing] for name, tensor in inputs.items()}
            with torch.no_grad():
                if self.padding_free:
                    self._forward_packed(rows, {})
                else:
                    backbone(**rows)
            cache.remember(keys, missing, self._head_site["representation"], self._head_site["pooled"])
        standin = standin_output(cache.lookup(keys).to(inputs["input_ids"].device), cache.pooled)
        backbone.forward = lambda *args, **kwargs: standin  # the head reads it; the hook at its input still runs
        try:
            return self.model(**inputs, output_hidden_states=False)
        finally:
            del backbone.forward

    def insert_before_head(self, name: str, module: torch.nn.Module) -> None:
        """Insert ``module`` ((batch, hidden) -> (batch, hidden)) between the representation and the task head.

        Modules chain in insertion order. The head consumes BERT/ALBERT's pooled output when the backbone
        has a pooler, otherwise the first ([CLS]/<s>) token of the last layer (RoBERTa, DistilBERT, ELECTRA):
        that vector is replaced by the module's output; the hidden states (and so every token cloud) are not.
        """
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

    def _at_head_input(self, backbone, args, out):
        """Forward hook on the backbone: record the head's input and pass it through the inserted modules."""
        if self._packed_pass:
            return None
        pooled = getattr(out, "pooler_output", None)
        representation = pooled if pooled is not None else out.last_hidden_state[:, 0]
        inserted, current = {}, representation
        for name, module in self.inserted.items():
            current = inserted[name] = module(current)
        self._head_site = {"representation": representation, "inserted": inserted, "pooled": pooled is not None}
        if not inserted:
            return None
        if pooled is not None:
            out.pooler_output = current
        else:
            rest = out.last_hidden_state[:, 1:]
            out.last_hidden_state = torch.cat([current.unsqueeze(1).to(rest.dtype), rest], dim=1)
        return out

    def save_pretrained(self, directory: str | PathLike, id2label: Optional[dict] = None,
                        label2id: Optional[dict] = None) -> None:
        """Write model and tokenizer to ``directory`` (loadable with ``ModelConfig(name_or_path=directory)``, the
        ``AutoModelFor*`` classes and ``pipeline()``); ``id2label``/``label2id`` name the head's outputs.

        Refused when modules are inserted before the head: a Hugging Face folder cannot hold them, and a
        model reloaded without them would feed its head a different representation.
        """
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
                merged = copy.deepcopy(self.model).merge_and_unload()
                merged.save_pretrained(Path(directory) / "merged")
                self.tokenizer.save_pretrained(Path(directory) / "merged")
        finally:
            if bars:
                transformers_logging.enable_progress_bar()
        self.tokenizer.save_pretrained(directory)

    def checkpoint_state(self) -> dict[str, Tensor]:
        """What a checkpoint holds: every tensor, or with LoRA the trainable ones alone (the adapters and the head;
        the rest is the pretrained model, rebuilt from its source)."""
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


_WEIGHTS_RESTORED_LATER = contextvars.ContextVar("weights_restored_later", default=False)


@contextlib.contextmanager
def restoring_weights() -> Iterator[None]:
    """Models built inside print no load report ("newly initialised: classifier.*"): their weights, the fresh
    head's included, are about to come from a checkpoint (a resumed or finished run, ``istar-export``).

    >>> with restoring_weights():
    ...     _WEIGHTS_RESTORED_LATER.get()
    True
    """
    token = _WEIGHTS_RESTORED_LATER.set(True)
    try:
        yield
    finally:
        _WEIGHTS_RESTORED_LATER.reset(token)


def _load_with_one_line_report(auto_class, path: str, **kwargs):
    """``auto_class.from_pretrained`` with transformers' load report (a table) replaced by one plain stderr line
    naming the freshly initialised tensors (the task head) and counting the checkpoint's unused ones; a damaged
    ``.safetensors`` file is a :class:`~istar_plugin.errors.ModelError` naming it."""
    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        with _no_gguf_bar() if kwargs.get("gguf_file") else contextlib.nullcontext():
            model, info = auto_class.from_pretrained(path, output_loading_info=True, **kwargs)
    except SafetensorError as error:
        raise damaged_weights(path, error, kwargs.get("revision")) from None
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    fresh, unused = sorted(info.get("missing_keys", ())), info.get("unexpected_keys", ())
    mismatched = [str(key[0] if isinstance(key, tuple) else key) for key in info.get("mismatched_keys", ())]
    if (fresh or unused or mismatched) and not _WEIGHTS_RESTORED_LATER.get():
        parts = [f"newly initialised: {', '.join(fresh) or 'none'}", f"{len(unused)} unused checkpoint tensor(s)"]
        if mismatched:
            parts.append(f"re-initialised for a new shape: {', '.join(mismatched)}")
        source = Path(path, kwargs["gguf_file"]) if kwargs.get("gguf_file") else path
        print(f"{type(model).__name__} from {source}: {'; '.join(parts)}", file=sys.stderr)
    return model


@contextlib.contextmanager
def _no_gguf_bar() -> Iterator[None]:
    """transformers draws its own tqdm bar while it dequantises a GGUF file, whatever its progress-bar setting: off."""
    from functools import partial

    from tqdm.auto import tqdm
    from transformers import modeling_gguf_pytorch_utils as gguf_loading

    drawn = gguf_loading.tqdm
    gguf_loading.tqdm = partial(tqdm, disable=True)
    try:
        yield
    finally:
        gguf_loading.tqdm = drawn


def _no_answer_in_padding(span_logits: Optional[Tensor], attention_mask: Tensor) -> Optional[Tensor]:
    """Extractive QA's (batch, length) start or end logits with the padding at the dtype's lowest value: the loss's
    softmax over a feature's positions is over its own tokens, however long its batchmates are (padded or
    padding-free alike); decoding reads the real positions only."""
    if span_logits is None:
        return None
    return span_logits.masked_fill(~attention_mask.bool(), torch.finfo(span_logits.dtype).min)


def _use_eos_as_padding(tokenizer) -> None:
    """Decoders (GPT-2) ship without a pad token: pad with end-of-text, which task inputs never contain (their
    tokenizers add no special tokens), so the classification head's "last token that is not padding" is the
    last real token. Padding never enters a token cloud (the attention mask excludes it)."""
    if tokenizer.eos_token is None:
        raise ValueError(f"{type(tokenizer).__name__} has neither a pad nor an end-of-text token to pad batches with")
    tokenizer.pad_token = tokenizer.eos_token


def _enable_activation_checkpointing(model) -> None:
    """Recompute layer activations in backward; transformers >= 5.x renamed gradient_ to activation_checkpointing."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
