"""The trainer's setup steps, in the order the Trainer runs them; each returns what it builds.

>>> from omegaconf import OmegaConf
>>> cfg = OmegaConf.create({"batch_size": 8, "eval_batch_size": None, "max_steps": 5,
...                         "optim": {"grad_accum": 2, "epochs": 3}})
>>> batch_sizes(cfg, world_size=2), schedule_length(cfg, train_count=40, world_size=2, local_batch_size=4)
((4, 8), Schedule(batches_per_epoch=5, steps_per_epoch=3, total_steps=5))
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

import torch
from omegaconf import DictConfig

from .. import config as config_module
from ..data.fingerprint import split_fingerprint
from ..data.packaged import seeded_split
from ..errors import ConfigError, ModelError
from ..models.preflight import check_model_limits
from ..models.loading import load_tokenizer
from ..registry import TASKS
from ..runtime.builder import Built, build_model
from ..runtime.precision import choose_precision
from ..storage.checkpoints import Checkpoints
from .divergence_guard import NonFiniteGuard, likely_cause
from .early_stopping import EarlyStopping
from .optim import build_optimizer
from .resume import holds_weights


def batch_sizes(cfg: DictConfig, world_size: int) -> tuple[int, int]:
    """Each rank's training batch and the evaluation batch; a global batch the ranks cannot share is refused."""
    if cfg.batch_size % world_size:
        raise ConfigError(f"batch_size {cfg.batch_size} (global) must be divisible by the world size {world_size}")
    return cfg.batch_size // world_size, cfg.eval_batch_size or cfg.batch_size


class TaskData(NamedTuple):
    """The task and its examples, with the fingerprint of what was read (checked again on resume)."""

    task: Any
    train: list
    eval: list
    fingerprint: dict


def load_data(cfg: DictConfig) -> TaskData:
    """The task's two splits, checked (``check_tokens``) before the model loads."""
    task = TASKS.build(cfg.task, config_module.data_config(cfg))
    train, evaluation = task.load("train"), task.load("eval")
    check_tokens = getattr(task, "check_tokens", None)
    if check_tokens is not None:
        check_tokens({"train": train, "eval": evaluation}, lambda: load_tokenizer_of(cfg))
    fingerprint = {split: split_fingerprint(examples, task.source_of(split))
                   for split, examples in (("train", train), ("eval", evaluation))}
    return TaskData(task, train, evaluation, fingerprint)


def load_tokenizer_of(cfg: DictConfig):
    """The run's tokenizer without the model's weights (:class:`ModelError` when it cannot be loaded)."""
    try:
        return load_tokenizer(config_module.model_config(cfg))
    except (OSError, ValueError) as error:
        reason = " ".join(str(error).split())[:300]
        raise ModelError(f"model {cfg.model.name_or_path!r}: its tokenizer cannot be loaded: {reason}") from None


def load_model(cfg: DictConfig, task, output_dir: Path, checkpoints: Checkpoints) -> Built:
    """The model and criterion, the model's limits checked first."""
    check_model_limits(cfg, kind=task.kind)
    return build_model(cfg, task, quiet=holds_weights(output_dir, checkpoints))


def encode_features(cfg: DictConfig, task, data: TaskData, tokenizer) -> tuple:
    """(train examples, train features, eval features, held-out validation examples and features, hooks, warning)."""
    train_examples, validation, hooks = data.train, [], []
    split = cfg.data.validation_split
    if split:
        train_examples, validation = seeded_split(train_examples, split, cfg.data.split_seed)
        hooks.append(EarlyStopping(len(validation), task.main_metric, cfg.patience))
    labels = {example.get("label") for example in train_examples} if task.kind == "classification" else ()
    warning = (f"the training set holds one class only (label {next(iter(labels))}): the classifier can only learn "
               "to predict it") if len(labels) == 1 else None
    return (train_examples, task.encode(train_examples, tokenizer, train=True),
            task.encode(data.eval, tokenizer, train=False), validation,
            task.encode(validation, tokenizer, train=False) if validation else [], hooks, warning)


class Schedule(NamedTuple):
    batches_per_epoch: int  # each rank's micro-batches
    steps_per_epoch: int  # optimizer steps
    total_steps: int  # of the run: all epochs', at most max_steps


def schedule_length(cfg: DictConfig, train_count: int, world_size: int, local_batch_size: int) -> Schedule:
    batches = math.ceil(math.ceil(train_count / world_size) / local_batch_size)
    steps = math.ceil(batches / cfg.optim.grad_accum)
    total = steps * cfg.optim.epochs
    return Schedule(batches, steps, total if cfg.max_steps is None else min(total, cfg.max_steps))


def build_optimization(cfg: DictConfig, model, total_steps: int, device: torch.device) -> tuple:
    """AdamW and its schedule, the precision on the device, fp16's gradient scaler, and the divergence guard."""
    optimizer, scheduler = build_optimizer(model, cfg.optim, total_steps)
    precision = choose_precision(cfg.precision, device)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    guard = NonFiniteGuard(device, patience=cfg.optim.overflow_patience if precision == "fp16" else 0,
                           hint=likely_cause(cfg.optim.lr, precision, cfg.criterion.get("lam")))
    return optimizer, scheduler, precision, scaler, guard

