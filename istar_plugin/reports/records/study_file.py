"""An Optuna study as text (``study.json``): what an archive of a search keeps instead of its database.

>>> study = as_study({"study": "demo", "directions": ["MAXIMIZE"], "user_attrs": {}, "trials": []})
>>> study.add_trial(optuna.trial.create_trial(params={"lr": 0.5}, value=0.75, intermediate_values={15: 0.5},
...     distributions={"lr": optuna.distributions.FloatDistribution(0.1, 1, log=True)}, user_attrs={"scores": {}}))
>>> record = json.loads(as_text(study_record(study)))
>>> record["trials"][0]["distributions"]["lr"]
{'attributes': {'high': 1.0, 'log': True, 'low': 0.1, 'step': None}, 'name': 'FloatDistribution'}
>>> again = as_study(record)
>>> again.best_trial.params, again.best_trial.intermediate_values, study_record(again) == record
({'lr': 0.5}, {15: 0.5}, True)
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Optional

import optuna
from optuna.distributions import distribution_to_json, json_to_distribution
from optuna.trial import FrozenTrial, TrialState

from ...errors import RunDirError, one_line
from ...storage.reading import read_text

STUDY_FILE = "study.json"
ENDED = frozenset({TrialState.COMPLETE.name, TrialState.PRUNED.name, TrialState.FAIL.name})
"""The states a trial never leaves: its record is final."""


def trial_record(trial: FrozenTrial) -> dict[str, Any]:
    """One trial as JSON-ready data."""
    return {"number": trial.number, "state": trial.state.name, "values": trial.values, "params": trial.params,
            "distributions": {name: json.loads(distribution_to_json(distribution))
                              for name, distribution in trial.distributions.items()},
            "user_attrs": trial.user_attrs, "system_attrs": trial.system_attrs,
            "intermediate_values": {str(step): value for step, value in trial.intermediate_values.items()},
            "datetime_start": _when(trial.datetime_start), "datetime_complete": _when(trial.datetime_complete)}


def study_record(study: optuna.Study) -> dict[str, Any]:
    """The study as JSON-ready data: its name, directions, user attributes and every trial in number order."""
    return {"study": study.study_name, "directions": [direction.name for direction in study.directions],
            "user_attrs": study.user_attrs,
            "trials": [trial_record(trial) for trial in sorted(study.get_trials(deepcopy=False),
                                                               key=lambda trial: trial.number)]}


def as_text(record: dict[str, Any]) -> str:
    """``study.json``'s text: the record with sorted keys, one value a line."""
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def read_record(path: Path, what: str) -> dict[str, Any]:
    """The record in ``path``; a missing or damaged one is one RunDirError line beginning with ``what``."""
    if not Path(path).is_file():
        raise RunDirError(f"{what}: its study record {path} is missing (istar-report SEARCH_DIR --archive writes it "
                          "last: archive the search again to complete it)")
    try:
        record = json.loads(read_text(path, "study record", RunDirError))
    except ValueError as error:
        raise RunDirError(f"{what}: its study record {path} is damaged ({one_line(error)[:200]})") from None
    if not isinstance(record, dict) or not isinstance(record.get("trials"), list):
        raise RunDirError(f"{what}: its study record {path} is damaged (no mapping holding a list of trials)")
    return record


def load(path: Path, what: str) -> optuna.Study:
    """The study recorded in ``path``; a record Optuna cannot rebuild is one RunDirError line too."""
    try:
        return as_study(read_record(path, what))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise RunDirError(f"{what}: its study record {path} is damaged ({one_line(error)[:200]})") from None


def as_study(record: dict[str, Any]) -> optuna.Study:
    """The in-memory study a record describes; its trials keep their numbers (a record holds every trial, from 0)."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "A new study created in memory" on every report
    try:
        study = optuna.create_study(study_name=record["study"],
                                    directions=[direction.lower() for direction in record["directions"]])
    finally:
        optuna.logging.set_verbosity(verbosity)
    for key, value in record["user_attrs"].items():
        study.set_user_attr(key, value)
    for number, trial in enumerate(sorted(record["trials"], key=lambda trial: trial["number"])):
        if trial["number"] != number:
            raise ValueError(f"trial {number} is missing")
        study.add_trial(_frozen(trial))
    return study


def _frozen(trial: dict[str, Any]) -> FrozenTrial:
    return FrozenTrial(number=trial["number"], state=TrialState[trial["state"]], value=None, values=trial["values"],
                       datetime_start=_time(trial["datetime_start"]),
                       datetime_complete=_time(trial["datetime_complete"]), params=trial["params"],
                       distributions={name: json_to_distribution(json.dumps(distribution))
                                      for name, distribution in trial["distributions"].items()},
                       user_attrs=trial["user_attrs"], system_attrs=trial["system_attrs"],
                       intermediate_values={int(step): value for step, value in trial["intermediate_values"].items()},
                       trial_id=trial["number"])


def _when(moment: Optional[datetime.datetime]) -> Optional[str]:
    return None if moment is None else moment.isoformat()


def _time(text: Optional[str]) -> Optional[datetime.datetime]:
    return None if text is None else datetime.datetime.fromisoformat(text)
