"""An ``istar-tune`` search read back (a search directory or an archive of one): study, final cells, problems; and
``study.json``, the study as an archive keeps it, written and read back."""
from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Optional, Sequence

import optuna
from optuna.distributions import distribution_to_json, json_to_distribution
from optuna.trial import FrozenTrial, TrialState

from ...config.searches import FINAL, RECORD, SCORES, SEED_STRIDE, TRIALS, SearchSpec, read_search, trial_dir
from ...errors import RunDirError, one_line
from ...metrics import main_metric
from ...storage.ownership import ARCHIVE_MARKER, SEARCH_MARKER
from ...storage.reading import read_text
from ...storage.results import RESULTS, ResultsError, read_results
from ...storage.study_database import connect, database_errors, shown
from .cells import CellFiles, Record, as_percent, collect_files

STUDY_FILE = "study.json"
STATES = {TrialState.COMPLETE: "finished", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed",
          TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}


def is_search(directory: Path) -> bool:
    """Whether ``directory`` is a search directory or an archive of one: ``search.yaml`` beside its marker."""
    return (Path(directory) / RECORD).is_file() and any((Path(directory) / marker).is_file()
                                                        for marker in (SEARCH_MARKER, ARCHIVE_MARKER))


def read_study(spec: SearchSpec, search_dir: Path, consequence: str = "no report written") -> optuna.Study:
    """The search's study, read without creating anything; RunDirError ending with ``consequence`` when missing."""
    if (Path(search_dir) / ARCHIVE_MARKER).is_file():
        return load(Path(search_dir) / STUDY_FILE, f"search archive {search_dir}")
    url = spec.storage_url(search_dir)
    local = next((Path(url[len(scheme):]).expanduser() for scheme in ("sqlite:///", "journal:")
                  if url.startswith(scheme)), None)
    if local is not None and not local.is_file():
        raise RunDirError(f"search directory {search_dir}: its study database {local} is missing (istar-tune writes "
                          f"it when the search starts); {consequence}")
    try:
        with database_errors(url):  # its faults: the line istar-tune prints for them
            return optuna.load_study(study_name=spec.name, storage=connect(url, create=False))
    except KeyError:
        raise RunDirError(f"search directory {search_dir}: its study database {shown(url)} holds no study named "
                          f"{spec.name}; {consequence}") from None


@dataclass
class Search:
    """A search as it stands: its record, its study, its task, and its final grid's records and problem cells."""

    spec: SearchSpec
    directory: Path
    study: optuna.Study
    task: str
    final: Sequence[Record] = ()
    final_problems: Sequence[tuple[str, str]] = ()
    final_files: dict[str, CellFiles] = field(default_factory=dict)  # what collection read of each final cell

    @cached_property
    def trials(self) -> list[FrozenTrial]:
        return sorted(self.study.get_trials(deepcopy=False), key=lambda trial: trial.number)

    @property
    def metric(self) -> str:
        """The task's main metric: what the trials were scored on, on the held-out split."""
        return main_metric(self.task)

    @property
    def maximize(self) -> bool:
        return self.study.direction == optuna.study.StudyDirection.MAXIMIZE

    @cached_property
    def best(self) -> Optional[FrozenTrial]:
        """The chosen trial: the study's best finished one, as ``istar-tune --final`` chose it."""
        return self.study.best_trial if self.in_state("finished") else None

    def percent(self, value: Optional[float]) -> Optional[float]:
        """A held-out score as the reports show it (accuracy x100; a perplexity as it is)."""
        return None if value is None else as_percent(self.task, self.metric, value)

    def runs(self, number: int) -> list[Path]:
        """Trial ``number``'s run directories that exist (``trials/NNNN/seed=S``)."""
        folder = trial_dir(self.directory, number)
        return [path for path in sorted(folder.iterdir()) if path.is_dir() and not path.name.startswith(".")
                ] if folder.is_dir() else []

    def improves(self, score: float, best: Optional[float]) -> bool:
        """Whether ``score`` is better than ``best`` (None: there is none yet)."""
        return best is None or (score > best if self.maximize else score < best)

    def in_state(self, state: str) -> list[FrozenTrial]:
        return [trial for trial in self.trials if STATES[trial.state] == state]

    def counts(self) -> str:
        """``3 finished, 1 pruned, 0 failed`` (and running or waiting trials, when there are any)."""
        states = ["finished", "pruned", "failed", *(s for s in ("running", "waiting") if self.in_state(s))]
        return ", ".join(f"{len(self.in_state(state))} {state}" for state in states)


def read(search_dir: Path) -> Search:
    """The search in ``search_dir``: its record, its study (:func:`read_study`) and its final grid's cells."""
    search_dir = Path(search_dir)
    spec = read_search(search_dir)
    study, task = read_study(spec, search_dir), spec.task()
    final, problems, files = collect_files(search_dir / FINAL) if (search_dir / FINAL).is_dir() else ([], [], {})
    return Search(spec, search_dir, study, task, final, problems, files)


def pruned_at(trial: FrozenTrial, seeds: Sequence[int]) -> Optional[tuple[int, int]]:
    """``(seed, optimizer step)`` of a trial's last reported validation score: where a pruned trial stopped."""
    if not trial.intermediate_values:
        return None
    index, step = divmod(max(trial.intermediate_values), SEED_STRIDE)
    return seeds[index] if index < len(seeds) else index, step


def disagreements(search: Search) -> list[dict[str, Any]]:
    """Where the study and the run directories disagree, as rows of ``trial``, ``path``, ``problem``."""
    rows = []
    for trial in search.in_state("finished"):
        scores = trial.user_attrs.get(SCORES) or {}
        for seed in search.spec.seeds:
            run = trial_dir(search.directory, trial.number) / f"seed={seed}"
            problem = _run_problem(run, trial.number, scores.get(str(seed)))
            if problem is not None:
                rows.append({"trial": trial.number, "path": str(run.relative_to(search.directory)),
                             "problem": problem})
    numbers = {trial.number for trial in search.trials}
    folder = search.directory / TRIALS
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not entry.name.startswith(".") and not (entry.name.isdigit() and int(entry.name) in numbers):
            rows.append({"trial": None, "path": str(entry.relative_to(search.directory)),
                         "problem": f"is the folder of no trial of the study (its trials: {_span(numbers)})"})
    return rows


def _run_problem(run: Path, number: int, recorded: Optional[float]) -> Optional[str]:
    try:
        results = read_results(run / RESULTS, require_finished=True)
    except ResultsError as error:
        return error.problem if run.is_dir() else "the run directory is missing"
    best = (results.validation or {}).get("best")
    of_trial = (results.extra.get("search_trial") or {}).get("trial")
    if of_trial != number:
        return f"{RESULTS} is of trial {of_trial}, not {number}"
    if recorded is None:
        return f"the study records no score for this seed; {RESULTS} has validation.best {best}"
    if best != recorded:
        return f"{RESULTS} has validation.best {best}, the study recorded {recorded}"
    return None


def _span(numbers: set[int]) -> str:
    return "none" if not numbers else f"{min(numbers)}-{max(numbers)}" if len(numbers) > 1 else str(min(numbers))


def problem_line(row: dict[str, Any]) -> str:
    """A disagreement as one line (``istar-report`` warns with it)."""
    return ("" if row["trial"] is None else f"trial {row['trial']}: ") + f"{row['path']}: {row['problem']}"


def trial_record(trial: FrozenTrial) -> dict[str, Any]:
    """One trial as JSON-ready data."""
    return {"number": trial.number, "state": trial.state.name, "values": trial.values, "params": trial.params,
            "distributions": {name: json.loads(distribution_to_json(distribution))
                              for name, distribution in trial.distributions.items()},
            "user_attrs": trial.user_attrs, "system_attrs": trial.system_attrs,
            "intermediate_values": {str(step): value for step, value in trial.intermediate_values.items()},
            **{key: None if (moment := getattr(trial, key)) is None else moment.isoformat()
               for key in ("datetime_start", "datetime_complete")}}


def study_text(study: optuna.Study) -> str:
    """``study.json``'s text: the study's name, directions, user attributes and every trial in number order."""
    return json.dumps({"study": study.study_name, "directions": [direction.name for direction in study.directions],
                       "user_attrs": study.user_attrs,
                       "trials": [trial_record(trial) for trial in sorted(study.get_trials(deepcopy=False),
                                                                          key=lambda trial: trial.number)]},
                      indent=1, sort_keys=True) + "\n"


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
    """The in-memory study recorded in ``path``, its trials keeping their numbers; RunDirError if unreadable."""
    record, verbosity = read_record(path, what), optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "A new study created in memory" on every report
    try:
        study = optuna.create_study(study_name=record["study"],
                                    directions=[direction.lower() for direction in record["directions"]])
        for key, value in record["user_attrs"].items():
            study.set_user_attr(key, value)
        for number, trial in enumerate(sorted(record["trials"], key=lambda trial: trial["number"])):
            if trial["number"] != number:
                raise ValueError(f"trial {number} is missing")
            study.add_trial(_frozen(trial))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise RunDirError(f"{what}: its study record {path} is damaged ({one_line(error)[:200]})") from None
    finally:
        optuna.logging.set_verbosity(verbosity)
    return study


def _frozen(trial: dict[str, Any]) -> FrozenTrial:
    return FrozenTrial(number=trial["number"], state=TrialState[trial["state"]], value=None, values=trial["values"],
                       **{key: None if trial[key] is None else datetime.datetime.fromisoformat(trial[key])
                          for key in ("datetime_start", "datetime_complete")}, params=trial["params"],
                       distributions={name: json_to_distribution(json.dumps(distribution))
                                      for name, distribution in trial["distributions"].items()},
                       user_attrs=trial["user_attrs"], system_attrs=trial["system_attrs"],
                       intermediate_values={int(step): value for step, value in trial["intermediate_values"].items()},
                       trial_id=trial["number"])
