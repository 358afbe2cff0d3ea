"""Trainer hooks: callbacks (:data:`EVENTS`) whose state is checkpointed; each reads a :class:`RunView` of the run
and acts through its :class:`TrainingControl`; istar-run and ``IStarTrainer`` call them by a :class:`HookDispatcher`.

>>> class Count(Hook):
...     steps = 0
...     def on_step_end(self, run, step, stats):
...         self.steps += 1
>>> counter = Count()
>>> HookDispatcher([counter], view=None).step_end(1, {})
>>> counter.steps
1
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Optional, Protocol, Sequence, runtime_checkable

import torch

EVENTS = ("on_fit_start", "on_epoch_start", "on_epoch_end", "on_validation", "on_step_end", "on_fit_end")


class TrainingControl:
    """What hooks may ask of the loop: stop after the current epoch, or evaluate again after ``on_fit_end``."""

    def __init__(self) -> None:
        self.should_stop = False
        self.stop_reason: Optional[str] = None
        self._evaluation: Optional[dict[str, Any]] = None

    def request_stop(self, reason: str) -> None:
        """End training after the current epoch; the first reason given is kept."""
        if not self.should_stop:
            self.should_stop, self.stop_reason = True, reason

    def request_evaluation(self, **annotations: Any) -> None:
        """Evaluate once more after ``on_fit_end``; ``annotations`` are added to that evaluation's record."""
        self._evaluation = {**(self._evaluation or {}), **annotations}

    def take_evaluation_request(self) -> Optional[dict[str, Any]]:
        """The pending request's annotations (``{}`` when none were given), or None; clears it (the loop calls this)."""
        request, self._evaluation = self._evaluation, None
        return request


@runtime_checkable
class RunView(Protocol):
    """Exactly what a hook may read of the run (a view refuses assignment). ``model``: the adapter (``hidden_size``,
    ``num_layers``, ``token_cloud``); ``mid_epoch``: part of this epoch is done; ``stop_requested``: a signal came."""

    model: Any
    train_features: Sequence[Any]
    eval_batch_size: int
    seed: int
    rank: int
    world_size: int
    device: torch.device
    step: int
    total_steps: int
    mid_epoch: bool
    show_progress: bool
    output_dir: Path
    control: TrainingControl
    stop_requested: bool

    def collate(self, features: Sequence[dict]) -> dict[str, Any]: ...
    def autocast(self) -> ContextManager: ...
    def evaluate(self, examples: Optional[Sequence[dict]] = None, features: Optional[Sequence[dict]] = None,
                 isotropy: bool = True) -> dict[str, Any]: ...
    def log(self, values: dict[str, Any], step: int) -> None: ...
    def say(self, line: str) -> None: ...


class ReadOnlyView:
    """Base of the run views: no instance dictionary and no assignment (``__init__`` uses ``object.__setattr__``)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a run view is read-only: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a run view is read-only: cannot delete {name!r}")


class Hook:
    """Base class: every callback is a no-op; override the ones you need. ``run`` is a :class:`RunView`."""

    def on_fit_start(self, run: RunView) -> None: ...
    def on_epoch_start(self, run: RunView, epoch: int) -> None: ...
    def on_epoch_end(self, run: RunView, epoch: int) -> None: ...

    def on_validation(self, run: RunView, epoch: int, metrics: dict[str, Any]) -> None:
        """After ``epoch``'s end, with the task's ``metrics`` on the held-out ``data.validation_split`` (if any)."""

    def on_step_end(self, run: RunView, step: int, stats: dict[str, Any]) -> None:
        """``stats``: the step's loss, criterion statistics and grad norm as device tensors, and ``lr`` as a float."""

    def on_fit_end(self, run: RunView) -> None:
        """After the last training step, before the final evaluation (e.g. restore the best weights)."""

    def results(self) -> dict[str, Any]:
        """Entries this hook adds to results.json."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class HookDispatcher:
    """Calls every hook of the live list ``hooks`` in order for an event, with the run's view (if it has the method)."""

    def __init__(self, hooks: Iterable[Hook], view: RunView):
        self.hooks: list[Hook] = hooks if isinstance(hooks, list) else list(hooks)
        self.view = view
        for hook in self.hooks:
            if hasattr(hook, "stop_training"):
                raise TypeError(f"hook {type(hook).__name__} has a stop_training attribute, which is no longer read; "
                                "stop training with run.control.request_stop(reason) instead")

    def dispatch(self, event: str, *args: Any) -> None:
        if event not in EVENTS:
            raise ValueError(f"unknown hook event {event!r}; events: {', '.join(EVENTS)}")
        for hook in self.hooks:
            if (method := getattr(hook, event, None)) is not None:
                method(self.view, *args)

    def __getattr__(self, name: str) -> Callable[..., None]:
        """``fit_start()``, ``epoch_end(epoch)``, ...: :meth:`dispatch` of the event ``on_<name>``."""
        if f"on_{name}" not in EVENTS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return functools.partial(self.dispatch, f"on_{name}")

    def results(self) -> dict[str, Any]:
        """What the hooks add to ``results.json``, later hooks' entries over earlier ones'."""
        merged: dict[str, Any] = {}
        for hook in self.hooks:
            merged.update(getattr(hook, "results", dict)())
        return merged

    def state_dicts(self) -> list[dict[str, Any]]:
        return [hook.state_dict() for hook in self.hooks]

    def load_state_dicts(self, states: Sequence[dict[str, Any]]) -> None:
        for hook, state in zip(self.hooks, states):
            hook.load_state_dict(state)
