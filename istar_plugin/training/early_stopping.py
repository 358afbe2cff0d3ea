"""Early stopping on the task's main metric over the held-out validation split; at the end the best parameters are
put back and the evaluation split measured again.

>>> stopper = EarlyStopping(249, "accuracy", patience=2)
>>> [stopper.observe(value, step) for step, value in enumerate([0.5, 0.6, 0.6, 0.55], start=1)]
[True, True, False, False]
>>> stopper.stopped_early, stopper.best, stopper.best_step
(True, 0.6, 2)
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from ..hooks import Hook, RunView
from ..metrics import better_sign


class EarlyStopping(Hook):
    """Follow each epoch's validation score, keep the best trainable parameters, stop after ``patience`` bad epochs."""

    def __init__(self, examples: int, metric: str, patience: Optional[int]):
        self.examples, self.metric, self.patience = examples, metric, patience
        self.best: Optional[float] = None
        self.best_step: Optional[int] = None
        self.best_parameters: dict[str, torch.Tensor] = {}
        self.epochs_without_improvement = 0
        self.stopped_early = False
        self.records: list[dict[str, Any]] = []

    def observe(self, value: Optional[float], step: int) -> bool:
        """Record a validation score; True when it improves on the best so far (a NaN or None never does)."""
        improved = value is not None and not math.isnan(value) and (
            self.best is None or better_sign(self.metric) * (value - self.best) > 0)
        if improved:
            self.best, self.best_step, self.epochs_without_improvement = value, step, 0
        else:
            self.epochs_without_improvement += 1
            if self.patience is not None and self.epochs_without_improvement >= self.patience:
                self.stopped_early = True
        return improved

    def on_fit_start(self, run: RunView) -> None:
        if self.stopped_early:
            run.control.request_stop(self._stop_reason())

    def on_validation(self, run: RunView, epoch: int, metrics: dict[str, Any]) -> None:
        value = None if metrics[self.metric] is None else float(metrics[self.metric])  # None: undefined
        if self.observe(value, run.step):
            self.best_parameters = {name: p.detach().cpu().clone() for name, p in run.model.named_parameters()
                                    if p.requires_grad}
        self.records.append({"step": run.step, "epoch": epoch, self.metric: value})
        run.log({f"valid/{self.metric}": value, "valid/best": self.best,
                 "valid/epochs_without_improvement": self.epochs_without_improvement}, run.step)
        if self.stopped_early:
            run.log({"valid/stopped_at_epoch": epoch}, run.step)
            run.control.request_stop(self._stop_reason())

    def on_fit_end(self, run: RunView) -> None:
        """Put the best parameters back and ask for the evaluation split to be re-measured, unless they are current."""
        if not self.best_parameters or self.best_step == run.step:
            return
        parameters = dict(run.model.named_parameters())
        with torch.no_grad():
            for name, value in self.best_parameters.items():
                parameters[name].copy_(value)
        run.control.request_evaluation(weights_from_step=self.best_step)

    def _stop_reason(self) -> str:
        return (f"early stopping: validation {self.metric} did not improve "
                f"for {self.epochs_without_improvement} epoch(s)")

    def results(self) -> dict[str, Any]:
        return {"validation": {"metric": self.metric, "examples": self.examples, "best": self.best,
                               "best_step": self.best_step, "stopped_early": self.stopped_early,
                               "patience": self.patience, "history": self.records}}

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_step": self.best_step, "best_parameters": self.best_parameters,
                "epochs_without_improvement": self.epochs_without_improvement, "records": self.records,
                "stop_training": self.stopped_early}  # the key checkpoints hold it under

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_step, self.best_parameters = state["best"], state["best_step"], state["best_parameters"]
        self.epochs_without_improvement, self.records = state["epochs_without_improvement"], state["records"]
        self.stopped_early = state["stop_training"]
