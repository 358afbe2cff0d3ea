"""The read-only :class:`~istar_plugin.hooks.RunView` that the ``istar-run`` trainer hands its hooks."""
from __future__ import annotations

import operator
from typing import Any, ContextManager, Optional, Sequence

import torch

from ..hooks import ReadOnlyView


class TrainerView(ReadOnlyView):
    """What a hook may read of a Trainer (the members of RunView); anything else raises ``AttributeError``."""

    __slots__ = ("__trainer",)

    def __init__(self, trainer) -> None:
        object.__setattr__(self, "_TrainerView__trainer", trainer)

    seed = property(lambda self: self.__trainer.cfg.seed)
    mid_epoch = property(lambda self: self.__trainer.batches_done > 0)  # the epoch resumes part-way
    stop_requested = property(lambda self: self.__trainer.stop_signal.received is not None)

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


for _name in ("model", "train_features", "eval_batch_size", "rank", "world_size", "device", "step", "total_steps",
              "show_progress", "output_dir", "control"):  # the trainer's attributes of the same name
    setattr(TrainerView, _name, property(operator.attrgetter(f"_TrainerView__trainer.{_name}")))
