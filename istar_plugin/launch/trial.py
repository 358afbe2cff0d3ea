"""One search trial as grid cells (one per seed), its pruning, and the worker that pulls trials from the study."""
from __future__ import annotations

import datetime
import os
import signal
import socket
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

import optuna
import submitit

from ..config import compose
from ..config.searches import (FAILURE, PROGRESS, SCORES, SEED_STRIDE, TRIAL_EVALUATION, SearchSpec, describe_values,
                               read_search, trial_arguments, trial_dir)
from ..errors import RunError, Stopped, one_line
from ..hooks import Hook, RunView
from ..metrics import main_metric
from ..storage.results import RESULTS, read_results
from ..storage.seeds import over_seeds
from ..storage.study_database import StudyDatabaseError, database_errors
from .cell import FINISHED_ELSEWHERE, RUNNING_ELSEWHERE, SNAPSHOT, CellRunner, outcome, write_snapshot
from .study import Claim, claim_trial, open_search, sample


class TrialPruning(Hook):
    """Report each validation score to ``trial``; stop the run when the pruner says so (never at the very end)."""

    def __init__(self, trial: optuna.Trial, metric: str, seed_index: int = 0, last_seed: bool = False):
        self.trial, self.metric, self.seed_index, self.last_seed = trial, metric, seed_index, last_seed
        self.pruned_at: Optional[int] = None

    def on_fit_start(self, run: RunView) -> None:
        if self.pruned_at is not None:  # resumed after the epoch that was pruned: stop again
            run.control.request_stop(self._reason(float("nan"), self.pruned_at))

    def on_validation(self, run: RunView, epoch: int, metrics: dict[str, Any]) -> None:
        if metrics[self.metric] is None:  # undefined (a correlation of constant predictions): nothing to report
            return
        value = float(metrics[self.metric])
        self.trial.report(value, self.seed_index * SEED_STRIDE + run.step)
        at_the_end = self.last_seed and run.step >= run.total_steps
        if not at_the_end and self.trial.should_prune():
            self.pruned_at = run.step
            run.control.request_stop(self._reason(value, run.step))

    def _reason(self, value: float, step: int) -> str:
        return (f"pruned by the search: validation {self.metric} {value:.4f} at step {step} "
                f"(trial {self.trial.number}, seed index {self.seed_index})")

    def results(self) -> dict[str, Any]:
        return {"search_trial": {"trial": self.trial.number, "pruned_at_step": self.pruned_at}}

    def state_dict(self) -> dict[str, Any]:
        return {"pruned_at": self.pruned_at}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pruned_at = state.get("pruned_at")


class TrialFailed(Exception):
    """A trial's run was refused or diverged; the message is its one-line reason."""


def run_trial(spec: SearchSpec, search_dir: Path, trial: optuna.Trial, values: dict[str, Any]) -> float:
    """Train the trial's runs as grid cells (one per seed) and return its score.
    Raises ``optuna.TrialPruned`` when pruned, :class:`TrialFailed` when a run is refused or diverges."""
    scores = {}
    for index, seed in enumerate(spec.seeds):
        run_dir = trial_dir(search_dir, trial.number) / f"seed={seed}"
        try:
            cfg = compose([*trial_arguments(spec, values, seed), TRIAL_EVALUATION, f"output_dir={run_dir}"])
            if not (run_dir / SNAPSHOT).is_file():
                write_snapshot(run_dir, cfg)
            pruning = TrialPruning(trial, main_metric(cfg.task), index, last_seed=index == len(spec.seeds) - 1)
            results = CellRunner(hooks=[pruning])(str(run_dir))
            if outcome(results) == RUNNING_ELSEWHERE:  # the claim holds the trial: a process outside the study
                raise TrialFailed(f"{run_dir}: {results['reason']}")
            if outcome(results) == FINISHED_ELSEWHERE:  # finished before its worker was stopped
                record = read_results(run_dir / RESULTS, require_finished=True)
                results = {"validation": record.validation}
                pruning.pruned_at = (record.extra.get("search_trial") or {}).get("pruned_at_step")
        except (Stopped, StudyDatabaseError):  # the trial stays running in the study, its checkpoint resumable
            raise
        except RunError as error:  # refused, diverged, a damaged checkpoint: one line, recorded as failed
            raise TrialFailed(one_line(error)) from None
        if pruning.pruned_at is not None:
            raise optuna.TrialPruned(f"seed {seed} at step {pruning.pruned_at}")
        best = (results.get("validation") or {}).get("best")
        if best is None:  # no held-out score: never a trial's value
            raise TrialFailed(f"{run_dir}: the run holds no held-out score (results.json has no validation.best)")
        scores[seed] = best
        trial.set_user_attr(SCORES, {str(s): v for s, v in scores.items()})
    return over_seeds(scores.values()).mean


class SearchWorker(submitit.helpers.Checkpointable):
    """``SearchWorker()(search_dir, worker)``: run trials until the budget is spent; returns the outcome counts."""

    def __call__(self, search_dir: str, worker: int = 0) -> dict[str, int]:
        if os.environ.get("SUBMITIT_EXECUTOR") == "local":  # stopped by SIGTERM at a step's end (run_local's stop)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # submitit's own handler ignores it
        search_dir_path = Path(search_dir)
        spec = read_search(search_dir_path)
        study = open_search(spec, search_dir_path, worker)

        def say(line: str) -> None:  # printed, and appended, stamped, to progress.log
            print(line, flush=True)
            stamp = datetime.datetime.now().isoformat(timespec="seconds")
            with open(search_dir_path / PROGRESS, "a", encoding="utf-8") as log:
                log.write(f"{stamp} {socket.gethostname()} worker {worker}: {line}\n")

        counts: Counter = Counter()
        with database_errors(spec.storage_url(search_dir_path)):
            while (claim := claim_trial(study, spec, search_dir_path)) is not None:
                try:
                    counts[self._run(spec, search_dir_path, study, claim, say)] += 1
                finally:
                    claim.release()
        say(f"no trial left of {spec.trials}: " + ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
            if counts else f"no trial left of {spec.trials}")
        return dict(counts)

    @staticmethod
    def _run(spec: SearchSpec, search_dir: Path, study: optuna.Study, claim: Claim, say: Callable[[str], None]) -> str:
        trial = claim.trial
        values = sample(trial, spec)
        say(f"trial {trial.number} {'resumed' if claim.resumed else 'started'}: {describe_values(values)}")
        try:
            score = run_trial(spec, search_dir, trial, values)
        except optuna.TrialPruned as pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            say(f"trial {trial.number} pruned ({pruned})")
            return "pruned"
        except TrialFailed as failure:
            trial.set_user_attr(FAILURE, str(failure))
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            say(f"trial {trial.number} failed: {failure}")
            return "failed"
        except (Stopped, KeyboardInterrupt) as stop:  # left running in the study, resumed by the next worker to start
            say(f"trial {trial.number} stopped ({one_line(stop)}): the next worker to start resumes it")
            raise
        study.tell(trial, score)
        best = study.best_trial
        say(f"trial {trial.number} finished: validation score {score:.4f} (best so far {best.value:.4f}, "
            f"trial {best.number})")
        return "finished"
