"""Trainer hooks: callbacks at fit start, epoch start/end, step end and fit end, with state saved in checkpoints.

A hook is called at fit start, epoch start/end, step end and fit end, and saves/restores its state with the
checkpoint, so a resumed run continues with exactly the state it stopped with.

Hooks receive the training loop as ``trainer`` and read only: ``model`` (an adapter: ``hidden_size``,
``token_cloud(output, layers)``, ``train(mode)``/``training``, called on a batch), ``train_features`` (a
sequence), ``collate(features)`` (a device batch), ``autocast()``, ``eval_batch_size``, ``cfg.seed``,
``rank``, ``world_size``, ``device``, ``step``, ``show_progress``, ``log(values, step)`` and ``say(line)``. The
``istar-run`` :class:`~istar_plugin.training.trainer.Trainer` provides them, and so does
:class:`istar_plugin.hf.IStarTrainer` for a ``transformers.Trainer``: both run this module's code.
"""
from __future__ import annotations

from typing import Any


class Hook:
    """Base class: every callback is a no-op; override the ones you need. A hook that sets ``stop_training``
    ends training after the current epoch."""

    stop_training = False

    def on_fit_start(self, trainer) -> None: ...

    def on_epoch_start(self, trainer, epoch: int) -> None: ...

    def on_epoch_end(self, trainer, epoch: int) -> None: ...

    def on_step_end(self, trainer, step: int, stats: dict[str, Any]) -> None:
        """``stats``: the step's loss, criterion statistics and grad norm as device tensors (reading one with
        ``float()`` or ``.item()`` waits for the device: avoid it in every step), and ``lr`` as a float."""

    def on_fit_end(self, trainer) -> None:
        """After the last training step, before the final evaluation (e.g. restore the best weights)."""

    def results(self) -> dict[str, Any]:
        """Entries this hook adds to results.json."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


