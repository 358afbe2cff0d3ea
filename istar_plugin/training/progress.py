"""A run's progress as plain log lines, for output that is not a terminal (files, SLURM logs, grid cells).

>>> train_line(20, 300, {"loss": 0.69312, "penalty": -0.4121, "isoscore_star": 0.58812, "lr": 2e-05}, 0.48)
'step 20/300 (7%)  loss 0.6931  penalty -0.4121  batch IsoScore* 0.5881  lr 2.00e-05  0.480 s/step  ETA 2m14s'
>>> eval_line(0, 300, {"accuracy": 0.49312, "eval_isoscore_star": 0.2191}, "accuracy")
'eval before training: accuracy 0.4931  eval IsoScore* 0.2191'
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Mapping

from ..isotropy import score_text

TRAIN_FIELDS = (("loss", "loss", ".4f"), ("penalty", "penalty", ".4f"), ("isoscore_star", "batch IsoScore*", ".4f"),
                ("lr", "lr", ".2e"))


def duration(seconds: float) -> str:
    """``75`` -> ``'1m15s'``; hours when long."""
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def train_line(step: int, total: int, means: Mapping[str, float], seconds_per_step: float) -> str:
    """Step/total, the interval's mean loss, penalty, batch IsoScore* (those the criterion reports), lr, speed, ETA."""
    parts = [f"step {step}/{total} ({step / total:.0%})"]
    parts += [f"{label} {score_text(means[key]) if key == 'isoscore_star' else format(means[key], spec)}"
              for key, label, spec in TRAIN_FIELDS if key in means]
    parts += [f"{seconds_per_step:.3f} s/step", f"ETA {duration(seconds_per_step * (total - step))}"]
    return "  ".join(parts)


def eval_line(step: int, total: int, result: Mapping[str, Any], main_metric: str) -> str:
    """The evaluation's main metric and IsoScore*."""
    when = "before training" if step == 0 else f"at step {step}/{total}"
    score = score_text(result["eval_isoscore_star"])
    return f"eval {when}: {main_metric} {metric_text(result[main_metric])}  eval IsoScore* {score}"


def metric_text(value: Any) -> str:
    """A metric for a log line: four decimals, or ``undefined`` (a correlation of a constant prediction: None)."""
    return "undefined" if value is None else f"{value:.4f}"


def complete_line(output_dir, step: int, total_steps: int, criterion: Mapping[str, Any]) -> str:
    """What a run says when its directory already holds it, finished."""
    described = criterion_description(criterion)
    return f"{output_dir}: already complete ({step}/{total_steps} steps, {described}); nothing to do"


def criterion_description(criterion: Mapping[str, Any]) -> str:
    """The criterion's name with its lambda and zeta, when it has them."""
    named = [f"{label} {criterion[key]}" for key, label in (("lam", "lambda"), ("zeta", "zeta")) if key in criterion]
    return criterion["name"] + (f" ({', '.join(named)})" if named else "")


def run_summary(results: Mapping[str, Any]) -> str:
    """The lines printed at the end of a run: what was trained, its scores, a warning when it collapsed."""
    main = results["main_metric"]
    lines = [f"{results['task']} with {results['model']}, criterion {criterion_description(results['criterion'])}, "
             f"seed {results['seed']}"]
    if initial := results.get("initial"):
        score = score_text(initial["eval_isoscore_star"])
        lines.append(f"before fine-tuning: {main} = {metric_text(initial[main])}, eval IsoScore* = {score}")
    lines.append(f"after {results['step']} steps:  {main} = {metric_text(results['metrics'][main])}, "
                 f"eval IsoScore* = {score_text(results['eval_isoscore_star'])}")
    if results.get("collapsed"):
        lines.append("COLLAPSED: every evaluation prediction is one class (the metric is a constant predictor's)")
    return "\n".join(lines)


class PhaseClock:
    """The wall seconds an attempt spends in each phase (a nested phase's for the inner one only), else ``other``."""

    def __init__(self, now=time.perf_counter):
        self.now, self.started = now, now()
        self.seconds: dict[str, float] = {}
        self._open: list[str] = []
        self._mark = self.started

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        self._charge()
        self._open.append(phase)
        try:
            yield
        finally:
            self._charge()
            self._open.pop()

    def _charge(self) -> None:
        now = self.now()
        if self._open:
            self.seconds[self._open[-1]] = self.seconds.get(self._open[-1], 0.0) + now - self._mark
        self._mark = now

    def line(self) -> str:
        """Where the time went since the clock started: each phase's seconds and share, longest first."""
        wall = self.now() - self.started
        phases = sorted(self.seconds.items(), key=lambda item: -item[1])
        phases.append(("other", max(0.0, wall - sum(self.seconds.values()))))
        return f"time {duration(wall)}: " + ", ".join(
            f"{phase} {seconds:.1f} s ({seconds / wall:.0%})" for phase, seconds in phases if wall > 0)
