"""A search's Optuna study and its directory: the database, the recorded search, sampling, and claiming trials.

>>> import tempfile
>>> from istar_plugin.config.searches import parse
>>> spec = parse({"fixed": {"recipe": "movie_snippets", "data.validation_split": 0.25},
...               "space": {"criterion.lam": {"low": 0.1, "high": 10, "log": True, "sign": "both"}}}, name="demo")
>>> folder = Path(tempfile.mkdtemp())
>>> claim = claim_trial(open_search(spec, folder), spec, folder)
>>> sorted(sample(claim.trial, spec)), sorted(claim.trial.params), claim.release()
(['criterion.lam'], ['criterion.lam (magnitude)', 'criterion.lam (sign)'], None)
"""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import optuna
import yaml

from ..config import compose
from ..config.searches import (RECORD, TRIAL_EVALUATION, VALUES, SearchError, SearchSpec, read_search, trial_arguments,
                               trial_dir)
from ..data.fingerprint import changed_splits
from ..errors import RunError
from ..metrics import better_sign, main_metric
from ..storage.atomic import atomic_write_text
from ..storage.lock import RunDirInUse, RunDirLock, held_here, waiting_lock
from ..storage.ownership import SEARCH_MARKER, check_writable, mark
from ..storage.study_database import connect, database_errors, shown
from ..training.setup_steps import load_data

CLAIM_LOCK = ".claim.lock"
SIGN, MAGNITUDE = "{} (sign)", "{} (magnitude)"
BOUND_DIR, BOUND_SEARCH, BOUND_DATA = "search_dir", "search", "data"  # the study's own attributes (:func:`bind`)


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler without its stop once every point ran (the search's budget ends it)."""

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, state: optuna.trial.TrialState,
                    values: Optional[Sequence[float]]) -> None:
        pass


def _sampler(spec: SearchSpec, worker: int) -> optuna.samplers.BaseSampler:
    if spec.sampler == "grid":
        return _GridSampler({d.key: list(d.choices) for d in spec.space}, seed=0)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=worker)
    if spec.sampler == "qmc":
        with warnings.catch_warnings():  # "experimental" since Optuna 3.0: said once in the docs, not at every start
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.QMCSampler(seed=worker, scramble=True)
    return optuna.samplers.TPESampler(seed=worker, n_startup_trials=min(10, max(2, spec.trials // 3)))


def _pruner(spec: SearchSpec) -> optuna.pruners.BasePruner:
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=min(5, max(1, spec.trials // 4)))
    if spec.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def open_search(spec: SearchSpec, search_dir: Path, worker: int = 0) -> optuna.Study:
    """The search's study, created with its directory on the first call; another search's directory is refused."""
    search_dir = Path(search_dir)
    check_writable(search_dir, SEARCH_MARKER, "search_dir")
    recorded = search_dir / RECORD
    if recorded.is_file():
        before = read_search(search_dir)
        if changed := sorted(spec.differences(before)):
            raise SearchError(f"search_dir {search_dir} holds another search ({before.name}; differs at "
                              f"{', '.join(changed)}); choose another search_dir=, nothing was changed")
    corner = {d.key: d.corners()[0] for d in spec.space}  # what a trial reads, as its run loads it
    data = load_data(compose([*trial_arguments(spec, corner, spec.seeds[0]), TRIAL_EVALUATION])).fingerprint
    fresh = not search_dir.exists()
    search_dir.mkdir(parents=True, exist_ok=True)
    url = spec.storage_url(search_dir)
    try:
        storage = connect(url)
        with database_errors(url):
            direction = "maximize" if better_sign(main_metric(spec.task())) > 0 else "minimize"
            study = optuna.create_study(study_name=spec.name, storage=storage, load_if_exists=True,
                                        direction=direction, sampler=_sampler(spec, worker), pruner=_pruner(spec))
            bind(study, spec, search_dir, data)
    except RunError:
        if fresh:
            with contextlib.suppress(OSError):
                search_dir.rmdir()
        raise
    mark(search_dir, SEARCH_MARKER, search=spec.name)
    atomic_write_text(recorded, yaml.safe_dump({"name": spec.name, **spec.as_dict()}, sort_keys=False))
    return study


def bind(study: optuna.Study, spec: SearchSpec, search_dir: Path, data: dict[str, Any]) -> None:
    """Record in ``study`` its search directory, search and data on the first call; refuse another's study."""
    where = f"study {spec.name} in {shown(spec.storage_url(search_dir))}"
    search = {key: value for key, value in spec.as_dict().items() if key != "trials"}
    mine = {BOUND_DIR: str(Path(search_dir).resolve()), BOUND_SEARCH: search, BOUND_DATA: data}
    attrs = study.user_attrs
    if spec.storage and attrs.get(BOUND_DIR, mine[BOUND_DIR]) != mine[BOUND_DIR]:  # study.db moves with its folder
        raise SearchError(f"the {where} belongs to the search in {attrs[BOUND_DIR]}: run it there "
                          f"(search_dir={attrs[BOUND_DIR]}), or give this search a storage= of its own; nothing was "
                          "changed")
    before = attrs.get(BOUND_SEARCH, search)
    if changed := sorted(key for key in set(before) | set(search) if before.get(key) != search.get(key)):
        raise SearchError(f"the {where} was made by another search file (differs at {', '.join(changed)}): restore "
                          "it, or start a new search_dir= with a storage= of its own; nothing was changed")
    if changed := changed_splits(attrs.get(BOUND_DATA, {}), data):
        raise SearchError(f"the data of search {spec.name} changed since its first trials: {'; '.join(changed)}; new "
                          "trials would be scored on other data than the old: restore the data, or search the new "
                          "data in a new search_dir=")
    for key, value in mine.items():
        if key not in attrs:
            study.set_user_attr(key, value)


def sample(trial: optuna.Trial, spec: SearchSpec) -> dict[str, Any]:
    """The trial's config values (a resumed trial gets its own back), also recorded as its ``values`` attribute."""
    values = {}
    for dimension in spec.space:
        key = dimension.key
        if dimension.choices:
            values[key] = trial.suggest_categorical(key, list(dimension.choices))
            continue
        suggest = trial.suggest_int if dimension.integer else trial.suggest_float
        low, high = (int(dimension.low), int(dimension.high)) if dimension.integer else (dimension.low, dimension.high)
        if dimension.sign == "positive":
            values[key] = suggest(key, low, high, log=dimension.log)
        else:
            magnitude = suggest(MAGNITUDE.format(key), low, high, log=True)
            sign = -1 if dimension.sign == "negative" else trial.suggest_categorical(SIGN.format(key), [-1, 1])
            values[key] = sign * magnitude
    trial.set_user_attr(VALUES, values)
    return values


@dataclass
class Claim:
    """A trial this worker runs, holding its folder's lock until :meth:`release`; ``resumed``: taken over."""

    trial: optuna.Trial
    lock: RunDirLock
    resumed: bool

    def release(self) -> None:
        self.lock.release()


def claim_trial(study: optuna.Study, spec: SearchSpec, search_dir: Path) -> Optional[Claim]:
    """The next trial for this worker: an orphaned running trial, else a new one while the budget lasts, else None."""
    with waiting_lock(Path(search_dir) / CLAIM_LOCK):
        trials = study.get_trials(deepcopy=False)
        for frozen in trials:
            if frozen.state == optuna.trial.TrialState.RUNNING:
                lock = _try_lock(trial_dir(search_dir, frozen.number))
                if lock is not None:
                    # Optuna names a stored trial by its id, which FrozenTrial keeps private
                    return Claim(optuna.Trial(study, frozen._trial_id), lock, resumed=True)
        if len(trials) >= spec.trials:
            return None
        trial = study.ask()
        lock = _try_lock(trial_dir(search_dir, trial.number))
        if lock is None:  # a folder of this number held by a process outside the study: a bug, not a race
            raise SearchError(f"trial {trial.number}'s folder {trial_dir(search_dir, trial.number)} is held by a "
                              "process outside this study")
        return Claim(trial, lock, resumed=False)


def _try_lock(folder: Path) -> Optional[RunDirLock]:
    if held_here(folder):
        return None
    try:
        return RunDirLock(folder, role="trial folder").acquire()
    except RunDirInUse:
        return None
