"""The read-only :class:`~istar_plugin.hooks.RunView` that the ``istar-run`` trainer hands its hooks.

>>> from istar_plugin.hooks import RunView
>>> sorted(set(dir(TrainerView)) & {"step", "history", "optimizer", "control"})
['control', 'step']
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, ContextManager, Optional, Sequence

import torch

from ..hooks import ReadOnlyView, TrainingControl


class TrainerView(ReadOnlyView):
    """What a hook may read of a :class:`~istar_plugin.training.trainer.Trainer` (the members of
    :class:`~istar_plugin.hooks.RunView`): assignment and every other attribute raise ``AttributeError``."""

    __slots__ = ("__trainer",)

    def __init__(self, trainer) -> None:
        object.__setattr__(self, "_TrainerView__trainer", trainer)

    @property
    def model(self) -> Any:
        return self.__trainer.model

    @property
    def train_features(self) -> Sequence[dict]:
        return self.__trainer.train_features

    @property
    def eval_batch_size(self) -> int:
        return self.__trainer.eval_batch_size

    @property
    def seed(self) -> int:
        return self.__trainer.cfg.seed

    @property
    def rank(self) -> int:
        return self.__trainer.rank

    @property
    def world_size(self) -> int:
        return self.__trainer.world_size

    @property
    def device(self) -> torch.device:
        return self.__trainer.device

    @property
    def step(self) -> int:
        return self.__trainer.step

    @property
    def total_steps(self) -> int:
        return self.__trainer.total_steps

    @property
    def mid_epoch(self) -> bool:
        """Some of the current epoch's micro-batches were already consumed (e.g. the epoch resumes part-way)."""
        return self.__trainer.batches_done > 0

    @property
    def show_progress(self) -> bool:
        return self.__trainer.show_progress

    @property
    def output_dir(self) -> Path:
        return self.__trainer.output_dir

    @property
    def control(self) -> TrainingControl:
        return self.__trainer.control

    @property
    def stop_requested(self) -> bool:
        return self.__trainer.stop_signal.received is not None

    def collate(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        return self.__trainer.collate(features)

    def autocast(self) -> ContextManager:
        return self.__trainer.autocast()

    def evaluate(self, examples: Optional[Sequence[dict]] = None, features: Optional[Sequence[dict]] = None,
                 isotropy: bool = True) -> dict[str, Any]:
        return self.__trainer.evaluate(examples, features, isotropy)

    def log(self, values: dict[str, Any], step: int) -> None:
        self.__trainer.log(values, step)

    def say(self, line: str) -> None:
        self.__trainer.say(line)
