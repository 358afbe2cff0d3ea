"""Every setting against Base on its model and task, paired by seed (``versus_base.md``), and power (``power.md``)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ...errors import DataError
from ...storage.predictions import PREDICTIONS, Predictions, read_predictions
from ..paper.istar import PAPER_MODELS, paper_result
from ..records.cells import Record, predictions_problem
from ..records.run_extras import ResultsReader, recorded_results
from ..records.settings import Setting, best_of, collapsed_mark, setting_row, settings
from ..tables import SETTING_HEADER, markdown_table, setting_cells
from .paired import LEVEL, Outcome, PairedDifference, paired_difference, resamples_examples, signed

BASE = "cross_entropy"
COLUMNS = ("model", "task", "method", "lam", "zeta", "variant", "metric", "seeds", "difference", "low", "high",
           "verdict", "resampled", "per_seed", "collapsed", "base_variant")
CAPTION = (f"Every setting against Base, paired by seed: mean difference (points), {LEVEL:.0%} bootstrap interval "
           "(resampling the seeds, and the evaluation examples where `resampled` says so), verdict at this "
           "sample size (n.d.: not distinguishable). A setting of one seed resamples its examples only (`examples "
           "only`): its interval holds no seed's variance, so its verdict (marked `one seed: examples only`) says how "
           "these two runs differ on these examples, not whether another seed would.\n\n")


Reader = Callable[[Record], tuple[Optional[Outcome], str]]  # a run's outcome or its problem, as read_outcome's
Compare = Callable[[Setting, Setting, str], Optional[PairedDifference]]  # as compare on a metric


def comparisons(records: Sequence[Record], compare_settings: Optional[Compare] = None) -> list[dict[str, Any]]:
    """One row per non-Base setting that shares a seed with a Base setting of its model and task, in settings order.
    ``compare_settings``: a setting against its Base on its metric (default :func:`compare`)."""
    against = compare_settings or compare
    return [{**setting_row(setting), "metric": setting.metric, **paired.columns(),
             "collapsed": f"{setting.collapsed}/{setting.n}" + (
                 f" (Base {base.collapsed}/{base.n})" if base.collapsed else ""),
             "base_variant": base.variant, "text": paired.text(), "paired": paired, "setting": setting}
            for setting, base in _against_base(records)
            if (paired := against(setting, base, setting.metric)) is not None]


def unpaired_predictions(records: Sequence[Record], read: Optional[Reader] = None) -> list[str]:
    """One line per run whose ``predictions.json`` a comparison with Base could not pair, each run once."""
    lines: dict[str, str] = {}
    for setting, base in _against_base(records):
        pairing = pair_outcomes(setting.task, setting.metric, setting.records, base.records, read)
        for path, problem in pairing.problems:
            lines.setdefault(path, f"{Path(path) / PREDICTIONS} {problem}: compared with Base by its seed alone, not "
                                   "its examples")
    return list(lines.values())


def _against_base(records: Sequence[Record]) -> list[tuple[Setting, Setting]]:
    """Each non-Base setting with its Base: of its variant, else the best of its model and task."""
    all_settings, pairs = settings(records), []
    for setting in all_settings:
        bases = [s for s in all_settings if s.method == BASE and (s.model, s.task) == (setting.model, setting.task)]
        if setting.method != BASE and bases:
            same_variant = [s for s in bases if s.variant == setting.variant]
            pairs.append((setting, same_variant[-1] if same_variant else best_of(bases)))
    return pairs


def comparison_of(rows: Sequence[dict[str, Any]], setting: Optional[Setting]) -> Optional[PairedDifference]:
    """The paired difference of ``setting`` in ``rows`` (None for Base, or a setting without one)."""
    return next((row["paired"] for row in rows if row["setting"] == setting), None)


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The comparison as a Markdown table."""
    header = (*SETTING_HEADER, "metric", "seeds", "Δ vs Base", "95% interval", "verdict", "per seed", "one class",
              "resampled")
    return markdown_table(header, ([*setting_cells(row), row["metric"], row["seeds"], signed(row["difference"]),
                                    f"[{signed(row['low'])}, {signed(row['high'])}]", row["verdict"], row["per_seed"],
                                    row["collapsed"], row["resampled"]] for row in rows))


def compare(setting: Setting, base: Setting, metric: Optional[str] = None, read: Optional[Reader] = None
            ) -> Optional[PairedDifference]:
    """``setting`` against ``base`` paired by seed on ``metric`` (default the table metric); None where unpaired.
    ``read``: each run's outcome (default :func:`read_outcome`)."""
    metric = metric or setting.metric
    ours, theirs = ({r.seed: r.score if metric == r.metric else dict(r.others).get(metric) for r in side.records}
                    for side in (setting, base))
    if None in (*ours.values(), *theirs.values()):
        return None
    pairing = pair_outcomes(setting.task, metric, setting.records, base.records, read)
    paired = paired_difference(setting.task, metric, pairing.method, pairing.base, scores=(ours, theirs))
    if paired is None or not pairing.problems:
        return paired
    return replace(paired, resampled=f"seeds ({'; '.join(pairing.reasons())})")


MISSING = "is missing"  # a run without predictions.json: a problem only beside runs that have one


@dataclass(frozen=True)
class Pairing:
    """Each side's outcome per seed (None: not resampled), and ``(cell path, problem)`` per unpairable run."""

    method: dict[int, Optional[Outcome]]
    base: dict[int, Optional[Outcome]]
    problems: tuple[tuple[str, str], ...]

    def reasons(self) -> list[str]:
        """Each problem naming its run by its folder's name: ``predictions.json of NAME PROBLEM``."""
        return [f"{PREDICTIONS} of {Path(path).name} {problem}" for path, problem in self.problems]


def pair_outcomes(task: str, metric: str, method_runs: Sequence[Record], base_runs: Sequence[Record],
                  read_run: Optional[Reader] = None) -> Pairing:
    """The outcomes of two settings' runs, paired by seed, with the problems of the runs on their common seeds.
    ``read_run``: each run's outcome (default :func:`read_outcome`)."""
    method, base = {r.seed: r for r in method_runs}, {r.seed: r for r in base_runs}
    read = {r.path: (read_run or read_outcome)(r) for r in (*method.values(), *base.values())}
    common = sorted(set(method) & set(base)) if resamples_examples(task, metric) else []  # else no run has problems
    paired = [run for seed in common for run in (method[seed], base[seed])]
    anyone_predicted = any(read[run.path][1] != MISSING for run in paired)
    problems: dict[str, str] = {run.path: read[run.path][1] for run in paired
                                if read[run.path][1] and (anyone_predicted or read[run.path][1] != MISSING)}
    for seed in common:
        ours, theirs = read[method[seed].path][0], read[base[seed].path][0]
        if ours is not None and theirs is not None and list(ours[1]) != list(theirs[1]):
            problems[method[seed].path] = f"does not match the references of {Path(base[seed].path).name}"
    outcome = lambda run: None if run.path in problems else read[run.path][0]  # noqa: E731
    return Pairing({s: outcome(r) for s, r in method.items()}, {s: outcome(r) for s, r in base.items()},
                   tuple(problems.items()))


def read_outcome(record: Record, read: ResultsReader = recorded_results,
                 predictions: Callable[[Path], Optional[Predictions]] = read_predictions
                 ) -> tuple[Optional[Outcome], str]:
    """The run's (predictions, references) and ``""``, or None and what is wrong with its ``predictions.json``
    (read by ``predictions``, checked against its ``results.json``, read by ``read``)."""
    cell = Path(record.path)
    try:
        scored = predictions(cell)
    except DataError as error:
        return None, f"is damaged ({str(error).removeprefix(f'{cell / PREDICTIONS}: ')})"
    if scored is None:
        return None, MISSING
    if scored.task != record.task:
        return None, f"is of task {scored.task}, its results.json of {record.task}"
    results = read(cell)
    problem = "" if results is None else predictions_problem(results, scored)
    return (None, problem) if problem else ((scored.predictions, scored.references), "")


POWER = 0.80  # the chance of deciding an effect that seeds_to_decide plans for
_Z_LEVEL, _Z_POWER = 1.959964, 0.841621  # standard normal quantiles at 0.975 and at POWER
POWER_COLUMNS = ("model", "task", "method", "lam", "zeta", "variant", "metric", "seeds", "difference", "half_width",
           "verdict", "paper_model", "paper_gain", "seeds_to_decide")
POWER_CAPTION = ("What the grid could detect: each setting's interval half-width against Base (the smallest effect its "
           "seeds tell from none) and, beside each of the paper's reported gains (Table 1, I-STAR or CosReg minus "
           f"Base), the seeds that would decide that gain with {POWER:.0%} power at the 95% level if each seed varies "
           "as here: `ceil(n * (half-width * 2.80 / (1.96 * gain))^2)`, from two seeds up. A rough floor: few seeds "
           "estimate the spread loosely.\n\n")


def seeds_to_decide(width: float, seeds: int, effect: float) -> Optional[int]:
    """Seeds that would decide ``effect`` with :data:`POWER`, from a half-width ``width`` measured on ``seeds``."""
    if effect == 0 or width <= 0 or seeds < 2:
        return None
    return max(2, math.ceil(seeds * (width * (_Z_LEVEL + _Z_POWER) / (_Z_LEVEL * abs(effect))) ** 2))


def paper_gains(method: str, task: str, metric: str) -> list[tuple[str, float]]:
    """``(paper model, method minus Base)`` for each model of the I-STAR paper's Table 1 that reports both."""
    found = [(model, paper_result(model, method, task, metric), paper_result(model, BASE, task, metric))
             for model in PAPER_MODELS]
    return [(model, round(ours[0] - base[0], 2)) for model, ours, base in found if ours and base]


def power_rows(comparisons: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting of ``comparisons`` and paper model with a reported gain."""
    table = []
    for row in comparisons:
        paired, setting = row["paired"], row["setting"]
        width = (paired.high - paired.low) / 2
        common = {key: row[key] for key in POWER_COLUMNS[:9]} | {"half_width": width, "verdict": row["verdict"],
                                                                  "setting": setting}
        for model, gain in paper_gains(setting.method, setting.task, setting.metric) or [(None, None)]:
            needed = None if gain is None else seeds_to_decide(width, row["seeds"], gain)
            table.append(common | {"paper_model": model, "paper_gain": gain, "seeds_to_decide": needed})
    return table


def power_markdown(table: Sequence[dict[str, Any]]) -> str:
    """The power table in Markdown: one line per setting, the paper's gains and the seeds each needs side by side;
    a collapsed setting's difference marked as Table 1 marks its score."""
    settings: dict[tuple, list[dict[str, Any]]] = {}
    for row in table:
        settings.setdefault(tuple(row[key] for key in POWER_COLUMNS[:7]), []).append(row)
    lines = []
    for group in settings.values():
        row, papers = group[0], [r for r in group if r["paper_model"] is not None]
        gains = "; ".join(f"{signed(r['paper_gain'])} ({PAPER_MODELS[r['paper_model']]})" for r in papers) or "—"
        needed = "; ".join("—" if r["seeds_to_decide"] is None else str(r["seeds_to_decide"]) for r in papers) or "—"
        lines.append([*setting_cells(row), row["seeds"], signed(row["difference"]) + collapsed_mark(row["setting"]),
                      f"{row['half_width']:.2f}", row["verdict"], gains, needed])
    return markdown_table((*SETTING_HEADER, "seeds", "Δ vs Base", "± half-width", "verdict", "paper's gain (model)",
                           "seeds to decide it"), lines)
