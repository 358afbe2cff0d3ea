"""I-STAR, or any registered criterion, inside a ``transformers.Trainer`` script: :class:`IStarTrainer` (usage:
README.md); the criterion's hooks (Sigma_S) run as Trainer callbacks and its statistics are logged with ``loss``.
Needs ``accelerate`` (``pip install 'istar_plugin[hf]'``)."""
from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from torch import Tensor
from transformers import Trainer, TrainerCallback
from transformers.utils import logging

from ..criterions import Criterion, task_loss
from ..hooks import HookDispatcher, ReadOnlyView, TrainingControl
from ..models.encoder import EncoderOutput
from ..models.token_cloud import TokenCloudSurface, attention_mask_or_ones
from ..registry import CRITERIONS, load_plugins
from ..training.step import IntervalStatistics

logger = logging.get_logger(__name__)

LABEL_KEYS = ("labels", "start_positions", "end_positions")


def model_kind(model) -> str:
    """The task kind of an ``AutoModelFor*`` model: ``extractive_qa``, ``regression`` or ``classification``."""
    name = type(model).__name__
    if name.endswith("ForQuestionAnswering"):
        return "extractive_qa"
    if name.endswith("ForSequenceClassification"):
        config = model.config
        return "regression" if config.problem_type == "regression" or config.num_labels == 1 else "classification"
    raise TypeError(f"IStarTrainer supports *ForSequenceClassification and *ForQuestionAnswering models, got {name}")


class HFModelView(TokenCloudSurface):
    """A Hugging Face model as criterions and hooks see the ``istar-run`` adapter."""

    def __init__(self, model: torch.nn.Module, kind: str):
        self.model, self.kind = model, kind
        self.inputs = set(inspect.signature(model.forward).parameters) - set(LABEL_KEYS)

    @property
    def training(self) -> bool:
        return self.model.training

    def train(self, mode: bool = True) -> "HFModelView":
        self.model.train(mode)
        return self

    def named_parameters(self, *args, **kwargs):
        return self.model.named_parameters(*args, **kwargs)

    def forward(self, batch: dict[str, Any], model: Optional[torch.nn.Module] = None):
        """(the Hugging Face output, its :class:`EncoderOutput`) of ``model`` (default: the view's) on the batch."""
        inputs = {key: value for key, value in batch.items() if key in self.inputs}
        out = (model or self.model)(**inputs, output_hidden_states=True)
        return out, EncoderOutput(logits=getattr(out, "logits", None), start_logits=getattr(out, "start_logits", None),
                                  end_logits=getattr(out, "end_logits", None), hidden_states=tuple(out.hidden_states),
                                  attention_mask=attention_mask_or_ones(inputs))

    def __call__(self, batch: dict[str, Any]) -> EncoderOutput:
        return self.forward(batch)[1]


class _LoopView(ReadOnlyView):
    __slots__ = ("_trainer", "_features", "control")

    def __init__(self, trainer: "IStarTrainer"):
        object.__setattr__(self, "_trainer", trainer)
        object.__setattr__(self, "_features", None)
        object.__setattr__(self, "control", TrainingControl())

    model = property(lambda self: self._trainer.view)
    seed = property(lambda self: self._trainer.args.seed)
    rank = property(lambda self: self._trainer.args.process_index)
    world_size = property(lambda self: self._trainer.args.world_size)
    device = property(lambda self: self._trainer.args.device)
    step = property(lambda self: self._trainer.state.global_step)
    total_steps = property(lambda self: self._trainer.state.max_steps)
    eval_batch_size = property(lambda self: self._trainer.args.per_device_eval_batch_size)
    output_dir = property(lambda self: Path(self._trainer.args.output_dir))
    show_progress = property(lambda self: False)
    stop_requested = property(lambda self: False)  # transformers.Trainer handles no stop signal of its own
    mid_epoch = property(lambda self: (self._trainer.state.epoch or 0.0) % 1 > 1e-6)

    @property
    def train_features(self):
        """The training set as the Trainer's loader keeps it (``remove_unused_columns``: inputs and labels only)."""
        if self._features is None:
            trainer, dataset = self._trainer, self._trainer.train_dataset
            if trainer.args.remove_unused_columns and hasattr(dataset, "column_names"):
                kept = trainer.view.inputs | {*LABEL_KEYS, "label", "label_ids", *trainer.label_names}
                dataset = dataset.remove_columns([name for name in dataset.column_names if name not in kept])
            object.__setattr__(self, "_features", dataset)
        return self._features

    def collate(self, features: Sequence[dict]) -> dict[str, Any]:
        """A batch of ``features`` by the Trainer's collator, its tensors on the Trainer's device."""
        batch = self._trainer.data_collator(list(features))
        return {key: value.to(self.device) if isinstance(value, Tensor) else value for key, value in batch.items()}

    def autocast(self):
        return self._trainer.autocast_smart_context_manager()

    def evaluate(self, examples: Optional[Sequence[dict]] = None, features: Optional[Sequence[dict]] = None,
                 isotropy: bool = True) -> dict[str, Any]:
        """The Trainer's own evaluation (``eval_*`` metrics) of ``features`` (default: its ``eval_dataset``)."""
        return self._trainer.evaluate(eval_dataset=features)

    def log(self, values: dict[str, Any], step: int) -> None:
        self._trainer.log(dict(values))

    def say(self, line: str) -> None:
        """A progress line through transformers' logging, from the main process (as the Trainer's own)."""
        if self._trainer.is_world_process_zero():
            logger.info(line)


class _HooksCallback(TrainerCallback):
    def __init__(self, trainer: "IStarTrainer"):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer.hooks.fit_start()

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.trainer.hooks.epoch_start(completed_epochs(state))

    def on_epoch_end(self, args, state, control, **kwargs):
        self.trainer.hooks.epoch_end(completed_epochs(state) - 1)
        if self.trainer.loop.control.should_stop:
            control.should_training_stop = True

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer.hooks.step_end(state.global_step, dict(self.trainer.last_stats))

    def on_train_end(self, args, state, control, **kwargs):
        self.trainer.hooks.fit_end()
        if self.trainer.loop.control.take_evaluation_request() is not None:
            self.trainer.loop.evaluate()


def completed_epochs(state) -> int:
    """The whole epochs a ``transformers`` trainer's ``state`` has completed: the index of the epoch in progress or
    starting (``state.epoch`` is fractional mid-epoch, after a resume or a ``max_steps`` stop)."""
    return math.floor((state.epoch or 0.0) + 1e-6)


class IStarTrainer(Trainer):
    """A ``transformers.Trainer`` whose training loss is a registered criterion with ``criterion_args`` as config."""

    def __init__(self, *args, criterion: str = "istar", criterion_args: Optional[dict[str, Any]] = None, **kwargs):
        super().__init__(*args, **kwargs)
        load_plugins()
        entry = CRITERIONS.get(criterion)
        config = entry.config_cls(**(criterion_args or {})) if entry.config_cls else None
        self.kind = model_kind(self.model)
        self.criterion = entry.cls(config, self.kind)
        if getattr(type(self.criterion), "adapt", Criterion.adapt) is not Criterion.adapt:
            raise TypeError(f"criterion {criterion!r} changes the model (adapt); IStarTrainer runs criterions that "
                            "only compute the loss: use istar-run for it")
        self.view = HFModelView(self.model, self.kind)
        self.loop = _LoopView(self)
        self.hooks = HookDispatcher(list(self.criterion.hooks()), self.loop)
        self.loss_is_scaled_for_ga = False  # the criterion's loss is a per-batch mean
        self.last_stats: dict[str, Tensor] = {}
        self._interval = IntervalStatistics()
        self.add_callback(_HooksCallback(self))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out, output = self.view.forward(inputs, model)
        if model.training:
            result = self.criterion(self.view, output, inputs)
            loss = result.loss
            # device tensors: summed where they live, read once per logging step (no host sync per step)
            self.last_stats = {name: torch.as_tensor(value, device=self.args.device).detach()
                               for name, value in result.stats.items()}
            self._interval.add(self.last_stats)
        else:
            loss = task_loss(self.kind, output, inputs)
        if return_outputs:
            return loss, type(out)(**{k: v for k, v in out.items() if k not in ("hidden_states", "loss")})
        return loss

    def log(self, logs: dict[str, float], start_time: Optional[float] = None) -> None:
        """Training logs (those with ``loss``) also get the criterion's statistics, averaged since the last one."""
        if "loss" in logs and self._interval.steps:
            means = self._interval.means(self.args.world_size)
            logs.update({name: round(value, 6) for name, value in means.items()})
            self._interval = IntervalStatistics()
        super().log(logs, start_time)

