"""The read-only :class:`~istar_plugin.hooks.RunView` that the ``istar-run`` trainer hands its hooks."""
from __future__ import annotations

from typing import Any, ContextManager, Optional, Sequence

import torch

from ..hooks import ReadOnlyView


class TrainerView(ReadOnlyView):
    """What a hook may read of a Trainer (the members of RunView); anything else raises ``AttributeError``."""

    __slots__ = ("__trainer",)

    def __init__(self, trainer) -> None:
        object.__setattr__(self, "_TrainerView__trainer", trainer)

    model = property(lambda self: self.__trainer.model)
    train_features = property(lambda self: self.__trainer.train_features)
    eval_batch_size = property(lambda self: self.__trainer.eval_batch_size)
    seed = property(lambda self: self.__trainer.cfg.seed)
    rank = property(lambda self: self.__trainer.rank)
    world_size = property(lambda self: self.__trainer.world_size)
    device = property(lambda self: self.__trainer.device)
    step = property(lambda self: self.__trainer.step)
    total_steps = property(lambda self: self.__trainer.total_steps)
    mid_epoch = property(lambda self: self.__trainer.batches_done > 0)  # the epoch resumes part-way
    show_progress = property(lambda self: self.__trainer.show_progress)
    output_dir = property(lambda self: self.__trainer.output_dir)
    control = property(lambda self: self.__trainer.control)
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
