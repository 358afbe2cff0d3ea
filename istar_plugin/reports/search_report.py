"""What ``istar-report`` writes for ``istar-tune`` searches: for one, :data:`TABLES`, :data:`FIGURES` and the final
grid's report in ``OUT/final``; for several of one task side by side, :data:`COMPARISON_TABLES` and its figure."""
from __future__ import annotations

import importlib.util
import re
import statistics
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Optional, Sequence

import optuna

from ..config.searches import FAILURE, FINAL, SCORES, VALUES, describe_values
from ..errors import ConfigError, one_line
from ..storage.results import RESULTS, read_results
from ..storage.seeds import over_seeds
from .comparisons.paired import LEVEL, PairedDifference, signed
from .comparisons.versus_base import compare
from .figures import Figure, save_png, single
from .grid_report import Grid, write_grid, write_outputs
from .records.cells import Record, wall_time_lines
from .records.run_extras import layer_isoscores
from .records.searches import STATES, Search, disagreements, pruned_at
from .records.settings import settings
from .tables import Table, markdown_table

BASELINE = "baseline"  # the final grid's baseline setting (cells setting=baseline,seed=S; a trial's setting=trialN)


@dataclass
class Report:
    """The search and ``istar-report``'s options for the final grid's report; shared outputs computed once."""

    search: Search
    paper_model: Optional[str] = None
    reference: Optional[str] = None

    @cached_property
    def chosen(self) -> list[dict[str, Any]]:
        return chosen_rows(self.search)

    @cached_property
    def disagreements(self) -> list[dict[str, Any]]:
        return disagreements(self.search)

    @cached_property
    def importances(self) -> dict[str, float] | str:
        """Each searched parameter's fANOVA importance (seeded), largest first; else why there is none."""
        finished = len(self.search.in_state("finished"))
        if finished < 2:
            return f"fewer than 2 trials finished ({finished})"
        if importlib.util.find_spec("sklearn") is None:
            return "Optuna's fANOVA needs scikit-learn: pip install scikit-learn"
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
        try:
            shares = optuna.importance.get_param_importances(self.search.study, evaluator=evaluator)
        except RuntimeError as error:  # "zero total variance": the finished trials' settings or scores are all alike
            return f"fANOVA finds nothing to attribute ({one_line(error)})"
        return {name: float(value) for name, value in shares.items()}


def shown(value: Any, spec: str = ".2f") -> str:
    """A table cell: None as a dash, a float to ``spec``."""
    return "—" if value is None else format(value, spec) if isinstance(value, float) else str(value)


def paired_cells(paired: Optional[PairedDifference]) -> list[str]:
    """A paired difference's mean, interval and verdict as table cells (dashes for none)."""
    return ["—"] * 3 if paired is None else [signed(paired.mean), f"[{signed(paired.low)}, {signed(paired.high)}]",
                                              paired.verdict]


def penalised_isoscore(search: Search, number: int) -> Optional[float]:
    """The median eval IsoScore* of the trial's penalised layers, averaged over its finished runs; None without."""
    medians = [statistics.median(scores) for run in search.runs(number)
               if (results := read_results(run / RESULTS, require_finished=True, strict=False)) is not None
               and (layers := results.criterion.get("layers")) and (scores := layer_isoscores(run, layers))]
    return statistics.fmean(medians) if medians else None


def trial_rows(search: Search) -> list[dict[str, Any]]:
    """One row per trial in number order."""
    rows = []
    for trial in search.trials:
        values, scores = trial.user_attrs.get(VALUES) or {}, trial.user_attrs.get(SCORES) or {}
        state = STATES[trial.state]
        stopped = pruned_at(trial, search.spec.seeds) if state == "pruned" else None
        rows.append({"trial": trial.number, "state": state,
                     **{dimension.key: values.get(dimension.key) for dimension in search.spec.space},
                     "held_out": search.percent(trial.value) if state == "finished" else None,
                     **{f"seed={seed}": search.percent(scores.get(str(seed))) for seed in search.spec.seeds},
                     **dict(zip(("pruned_seed", "pruned_step"), stopped or (None, None))),
                     "failure": trial.user_attrs.get(FAILURE),
                     "runs": " ".join(str(run.relative_to(search.directory)) for run in search.runs(trial.number)),
                     "wall_s": None if trial.duration is None else trial.duration.total_seconds(),
                     "penalised_isoscore": penalised_isoscore(search, trial.number)})
    return rows


def _trials_markdown(report: Report, rows: Sequence[dict[str, Any]]) -> str:
    search = report.search
    keys = [dimension.key for dimension in search.spec.space]
    seeds = [f"seed={seed}" for seed in search.spec.seeds]
    layered = any(row["penalised_isoscore"] is not None for row in rows)
    header = ["trial", "state", *keys, f"held-out {search.metric}", *(seed.replace("=", " ") for seed in seeds),
              *(["penalised layers' eval IsoScore*"] if layered else []), "pruned at", "failure", "run directories",
              "wall min"]
    return markdown_table(header, [
        [str(row["trial"]), row["state"], *(shown(row[key], ".4g") for key in keys), shown(row["held_out"]),
         *(shown(row[seed]) for seed in seeds), *([shown(row["penalised_isoscore"], ".3g")] if layered else []),
         "—" if row["pruned_step"] is None else f"seed {row['pruned_seed']}, step {row['pruned_step']}",
         shown(row["failure"]), row["runs"] or "—",
         shown(None if row["wall_s"] is None else row["wall_s"] / 60, ".1f")]
        for row in rows])


def _trials_caption(report: Report) -> str:
    search = report.search
    unit = "percent; " if search.percent(1.0) == 100.0 else ""  # nothing for a perplexity
    return (f"Search {search.spec.name}: {len(search.trials)} trials of {search.spec.trials} ({search.counts()}), "
            f"each scored on the {search.metric} of the split held out of the training set ({unit}held-out: "
            f"the mean over seeds {list(search.spec.seeds)}; {'higher' if search.maximize else 'lower'} is "
            "better).\n\n")


def final_runs(search: Search) -> dict[str, list[Record]]:
    """Setting (``trialN``, ``baseline``, from each final cell's name) -> its finished runs, each its own variant."""
    runs: dict[str, list[Record]] = {}
    for record in search.final:
        setting = dict(part.partition("=")[::2] for part in Path(record.path).name.split(",")).get("setting", "")
        if re.fullmatch(r"trial\d+|baseline", setting):
            runs.setdefault(setting, []).append(replace(record, variant=setting))
    return runs


def against_baseline(runs: Sequence[Record], baseline_runs: Sequence[Record]) -> Optional[PairedDifference]:
    """A setting's final runs minus the baseline's, paired by seed (:func:`~.comparisons.versus_base.compare`)."""
    if not runs or not baseline_runs:
        return None
    (setting,), (baseline,) = settings(runs), settings(baseline_runs)
    return compare(setting, baseline)


def chosen_rows(search: Search) -> list[dict[str, Any]]:
    """The chosen setting, the baseline, then any earlier choice in ``final/``; none without a choice."""
    if search.best is None:
        return []
    runs, chosen = final_runs(search), f"trial{search.best.number}"
    trials = {f"trial{trial.number}": trial for trial in search.trials}
    earlier = sorted((s for s in runs if s not in (chosen, BASELINE)), key=lambda s: int(s[len("trial"):]))
    seeds = sorted({*search.spec.final_seeds, *(record.seed for group in runs.values() for record in group)})
    rows = []
    for setting in [chosen, *([BASELINE] if BASELINE in runs else []), *earlier]:
        scores = {record.seed: record.score for record in runs.get(setting, [])}
        trial = trials.get(setting)
        paired = None if setting == BASELINE else against_baseline(runs.get(setting, []), runs.get(BASELINE, []))
        columns = paired.columns() if paired else {}
        rows.append({"setting": setting, "chosen": setting == chosen,
                     "values": " ".join(search.spec.baseline) if setting == BASELINE else
                     describe_values((trial.user_attrs.get(VALUES) or {}) if trial else {}),
                     "held_out": search.percent(trial.value) if trial else None,
                     "metric": runs[setting][0].metric if setting in runs else None,
                     **{f"seed={seed}": scores.get(seed) for seed in seeds},
                     "mean": over_seeds(scores.values()).mean if scores else None,
                     "paired_seeds": columns.get("seeds"),
                     **{key: columns.get(key) for key in ("difference", "low", "high", "verdict", "resampled")},
                     "paired": paired})
    return rows


def _chosen_markdown(report: Report, rows: Sequence[dict[str, Any]]) -> str:
    seeds = [key for key in rows[0] if key.startswith("seed=")]
    header = ["setting", "values", f"held-out {report.search.metric}", *(seed.replace("=", " ") for seed in seeds),
              "mean", "Δ vs baseline", f"{LEVEL:.0%} interval", "verdict", "resampled"]
    text = markdown_table(header, [
        [row["setting"] + (" (chosen)" if row["chosen"] else ""), row["values"], shown(row["held_out"]),
         *(shown(row[seed]) for seed in seeds), shown(row["mean"]),
         *paired_cells(row["paired"]), "—" if row["paired"] is None else row["resampled"]]
        for row in rows])
    if rows[0]["mean"] is None:
        text += (f"\nfinal/ holds no finished cell of the chosen setting ({rows[0]['setting']}): istar-tune "
                 f"{report.search.spec.name} --final scores it and the baseline on the evaluation split.\n")
    return text


def _chosen_caption(report: Report) -> str:
    search = report.search
    best, running = search.best, search.in_state("running")
    return (f"Chosen: trial {best.number} ({describe_values(best.user_attrs.get(VALUES) or {})}), held-out "
            f"{search.metric} {search.percent(best.value):.2f}, the best of {len(search.in_state('finished'))} "
            f"finished trials ({search.counts()}{'; the choice may change' if running else ''}). On the evaluation "
            f"split: each setting's score per seed (percent) and a trial's difference to the baseline "
            f"({' '.join(search.spec.baseline)}), paired by seed, with its {LEVEL:.0%} bootstrap interval and verdict "
            "at this sample size.\n\n")


def _problems_markdown(report: Report, rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return (f"None: the runs of the {len(report.search.in_state('finished'))} finished trials hold the scores the "
                "study recorded, and every folder under trials/ is a trial of the study.\n")
    return markdown_table(("trial", "path", "problem"),
                           [[shown(row["trial"]), row["path"], row["problem"]] for row in rows])


def history_points(search: Search) -> dict[str, list]:
    """``finished`` (trial, score), ``pruned`` (trial, last score), ``failed`` trials, ``best`` so far (percent)."""
    points: dict[str, list] = {"finished": [], "pruned": [], "failed": [], "best": []}
    for trial in search.trials:
        state = STATES[trial.state]
        if state == "finished":
            score = search.percent(trial.value)
            best = points["best"][-1][1] if points["best"] else None
            points["finished"].append((trial.number, score))
            points["best"].append((trial.number, score if search.improves(score, best) else best))
        elif state == "pruned" and trial.intermediate_values:
            last = trial.intermediate_values[max(trial.intermediate_values)]
            points["pruned"].append((trial.number, search.percent(last)))
        elif state == "failed":
            points["failed"].append(trial.number)
    return points


def _draw_history(report: Report, path: Path) -> Path:
    search = report.search
    points = history_points(search)
    fig, ax = single(f"Search {search.spec.name}: optimisation history", "trial", f"held-out {search.metric}")
    if points["finished"]:
        ax.plot(*zip(*points["finished"]), "o", color="tab:blue", label="finished")
        ax.step(*zip(*points["best"]), where="post", color="tab:green", label="best so far")
    if points["pruned"]:
        ax.plot(*zip(*points["pruned"]), "x", color="tab:orange", label="pruned (its last score)")
    for index, number in enumerate(points["failed"]):
        ax.axvline(number, color="tab:red", linestyle=":", label="failed" if index == 0 else None)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=8)
    return save_png(fig, path)


def _draw_importances(report: Report, path: Path) -> Path:
    shares, search = report.importances, report.search
    fig, ax = single(f"Search {search.spec.name}: parameter importances\n(fANOVA on the held-out {search.metric}, "
                     f"{len(search.in_state('finished'))} finished trials)", "importance", "")
    names = list(shares)[::-1]
    ax.barh(names, [shares[name] for name in names], color="tab:blue")
    for index, name in enumerate(names):
        ax.text(shares[name], index, f" {shares[name]:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, 1.15)
    return save_png(fig, path)


TABLES = (
    Table("trials", rows=lambda report: trial_rows(report.search), caption=_trials_caption,
          markdown=_trials_markdown, always=True),
    Table("chosen", rows=lambda report: report.chosen, caption=_chosen_caption, markdown=_chosen_markdown,
          csv_rows=lambda report, rows: [{k: v for k, v in row.items() if k != "paired"} for row in rows],
          absent=lambda report: f"chosen.md not written: no trial finished ({report.search.counts()})"),
    Table("problems", rows=lambda report: report.disagreements, columns=("trial", "path", "problem"), always=True,
          caption="Where the study and the trials' run directories disagree (listed, never averaged).\n\n",
          markdown=_problems_markdown),
)

FIGURES = (
    Figure("history.png", lambda report: any(history_points(report.search).values()), _draw_history,
           "no trial of the study has ended"),
    Figure("importances.png", lambda report: not isinstance(report.importances, str), _draw_importances,
           lambda report: report.importances),
)


def write_report(report: Report, out: Path) -> list[str]:
    """Write every table and figure into ``out``, the final grid's report into ``out/final``; returns what was not."""
    unwritten = write_outputs(TABLES, FIGURES, report, out)
    if report.search.final:
        write_grid(Grid(report.search.final, report.paper_model, report.reference, report.search.final_files),
                   out / FINAL)
    return unwritten


def summary(report: Report) -> list[str]:
    """What ``istar-report SEARCH_DIR`` prints: trials, the choice, its paired difference to the baseline, problems."""
    search = report.search
    lines = [f"search {search.spec.name}: {len(search.trials)} of {search.spec.trials} trials ({search.counts()})"]
    if running := search.in_state("running"):
        lines.append("running: " + ", ".join(f"trial {trial.number} (since {trial.datetime_start:%Y-%m-%d %H:%M})"
                                             for trial in running))
    if not report.chosen:
        return lines + ["chosen: none, no trial finished"]
    chosen = report.chosen[0]
    lines.append(f"chosen: trial {search.best.number} ({chosen['values']}), held-out {search.metric} "
                 f"{chosen['held_out']:.2f}")
    paired = chosen["paired"]
    if paired is None:
        lines.append(f"final: no paired comparison of {chosen['setting']} with the {BASELINE} in {FINAL}/ yet "
                     f"(istar-tune {search.spec.name} --final runs it)")
    else:
        seeds = f"seed{'s' if len(paired.seeds) > 1 else ''} {', '.join(map(str, paired.seeds))}"
        lines.append(f"final on the evaluation split, {chosen['setting']} - {BASELINE} paired by seed ({seeds}): "
                     f"{' '.join(paired_cells(paired))} ({chosen['metric']} points; resampled {paired.resampled})")
    if search.final or search.final_problems:
        lines.append(f"final: {len(search.final)} cells finished, {len(search.final_problems)} missing or failed")
        lines += [f"  {Path(path).relative_to(search.directory)}: {reason}" for path, reason in search.final_problems]
        lines += wall_time_lines(search.final, search.final_files)
    return lines


@dataclass
class Comparison:
    """Searches of one task; the first is the one the others' choices are compared with."""

    searches: Sequence[Search]

    @cached_property
    def labels(self) -> list[str]:
        """Each search's name, or its directory where names repeat."""
        names = [search.spec.name for search in self.searches]
        return [name if names.count(name) == 1 else str(search.directory)
                for name, search in zip(names, self.searches)]

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        """One row per search: what it trained, its choice, and the choice against its baseline and the first's."""
        first: list[Record] = []
        rows = []
        for index, (label, search) in enumerate(zip(self.labels, self.searches)):
            chosen = (chosen_rows(search) or [{}])[0]
            runs = [replace(record, variant=f"{label}: {record.variant}")
                    for record in final_runs(search).get(chosen.get("setting"), [])]
            first = runs if index == 0 else first
            rows.append({"search": label, "sampler": search.spec.sampler, "pruner": search.spec.pruner, "trials":
                         search.counts(), "steps": sum(trial_steps(search, trial.number) for trial in search.trials),
                         "hours": sum(trial.duration.total_seconds() for trial in search.trials
                                      if trial.duration) / 3600,
                         "chosen": f"trial {search.best.number}" if chosen else None, "values": chosen.get("values"),
                         "held_out": chosen.get("held_out"), "seeds": len(runs) or None, "mean": chosen.get("mean"),
                         "versus_baseline": chosen.get("paired"),
                         "versus_first": None if index == 0 else against_baseline(runs, first)})
        return rows


def compare_searches(searches: Sequence[Search]) -> Comparison:
    """The searches as a :class:`Comparison`: at least two, of one task; else one ConfigError line."""
    if len(searches) < 2:
        raise ConfigError("comparing searches needs two or more search directories")
    tasks = sorted({search.task for search in searches})
    if len(tasks) > 1:
        raise ConfigError(f"searches of different tasks ({', '.join(tasks)}) are not compared: their choices are "
                          "scored on different metrics")
    return Comparison(searches)


def trial_steps(search: Search, number: int) -> int:
    """The optimizer steps the trial's runs recorded training (a stopped run's to where it stopped)."""
    return sum(results.step for run in search.runs(number)
               if (results := read_results(run, strict=False)) is not None and results.step is not None)


def searches_table(rows: Sequence[dict[str, Any]], metric: str, first: str) -> str:
    """The searches side by side (:attr:`Comparison.rows`) as a Markdown table."""
    header = ["search", "sampler, pruner", "trials", "optimizer steps", "trial hours", "chosen",
              f"held-out {metric}", "eval mean (seeds)", "Δ vs its baseline", f"{LEVEL:.0%} interval", "verdict",
              f"Δ vs {first}'s choice", f"{LEVEL:.0%} interval", "verdict"]
    return markdown_table(header, [
        [row["search"], f"{row['sampler']}, {row['pruner']}", row["trials"], str(row["steps"]),
         shown(row["hours"], ".1f"), "none" if row["chosen"] is None else f"{row['chosen']}: {row['values']}",
         shown(row["held_out"]), "—" if row["mean"] is None else f"{row['mean']:.2f} ({row['seeds']})",
         *paired_cells(row["versus_baseline"]), *paired_cells(row["versus_first"])] for row in rows])


def _differences(comparison: Comparison) -> str:
    """What the searches' trial runs differ in beyond the searched values (their ``fixed`` overrides)."""
    fixed = [dict(argument.partition("=")[::2] for argument in search.spec.fixed) for search in comparison.searches]
    keys = sorted({key for overrides in fixed for key in overrides
                   if len({overrides_.get(key) for overrides_ in fixed}) > 1})
    if not keys:
        return "Their trials run alike but for the values searched."
    differing = [f"{key} (" + ", ".join(f"{label} {overrides.get(key, 'unset')}"
                                         for label, overrides in zip(comparison.labels, fixed)) + ")" for key in keys]
    return f"Their trials' runs differ beyond the values searched, in: {'; '.join(differing)}."


def _caption(comparison: Comparison) -> str:
    search = comparison.searches[0]
    return (f"Searches of {search.task} compared: each chose on the {search.metric} of the split held out of the "
            "training set; its choice and its baseline were then trained at its final seeds and scored once on the "
            "evaluation split (percent). Optimizer steps and trial hours: all its trials' runs, a pruned one's to "
            f"where it stopped. Δ: paired by seed, with its {LEVEL:.0%} bootstrap interval and verdict at this sample "
            f"size. {_differences(comparison)}\n\n")


def _csv_rows(comparison: Comparison, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    flat = []
    for row in rows:
        item = {key: value for key, value in row.items() if not key.startswith("versus_")}
        for key in ("versus_baseline", "versus_first"):
            columns = row[key].columns() if row[key] else {}
            item.update({f"{key}_{name}": columns.get(name)
                         for name in ("difference", "low", "high", "verdict", "seeds")})
        flat.append(item)
    return flat


COMPARISON_TABLES = (Table("searches", rows=lambda comparison: comparison.rows, caption=_caption, always=True,
                markdown=lambda comparison, rows: searches_table(rows, comparison.searches[0].metric,
                                                                 comparison.labels[0]),
                csv_rows=_csv_rows),)


def progress_points(search: Search) -> list[tuple[int, float]]:
    """(steps trained so far, best held-out score so far, percent) after each finished trial, as they ended."""
    trained, best, points = 0, None, []
    for trial in sorted((trial for trial in search.trials if trial.datetime_complete is not None),
                        key=lambda trial: trial.datetime_complete):
        trained += trial_steps(search, trial.number)
        if STATES[trial.state] == "finished":
            score = search.percent(trial.value)
            best = score if search.improves(score, best) else best
            points.append((trained, best))
    return points


def _draw_progress(comparison: Comparison, path: Path) -> Path:
    search = comparison.searches[0]
    fig, ax = single(f"Searches of {search.task}: the best held-out {search.metric} so far", "optimizer steps trained "
                     "by the search's trials", f"best held-out {search.metric}")
    for label, each in zip(comparison.labels, comparison.searches):
        if points := progress_points(each):
            ax.step(*zip(*points), where="post", marker="o", markersize=3, label=label)
    ax.legend(fontsize=8)
    return save_png(fig, path)


def write_comparison(comparison: Comparison, out: Path) -> None:
    """``searches.md/.csv`` and ``searches.png`` into ``out``."""
    figure = Figure("searches.png", lambda comparison: comparison.searches, _draw_progress, "")
    write_outputs(COMPARISON_TABLES, (figure,), comparison, out)


def comparison_summary(comparison: Comparison) -> list[str]:
    """What ``istar-report`` prints: a line per search."""
    lines = []
    for row in comparison.rows:
        line = (f"{row['search']} (sampler {row['sampler']}, pruner {row['pruner']}; {row['trials']}): "
                f"{row['steps']} optimizer steps in {row['hours']:.1f} h of trials; ")
        if row["chosen"] is None:
            lines.append(line + "chose nothing (no trial finished)")
            continue
        line += f"chose {row['chosen']} ({row['values']}), held-out {row['held_out']:.2f}"
        if row["mean"] is not None:
            line += f"; eval mean {row['mean']:.2f} over {row['seeds']} seeds"
        for key, what in (("versus_baseline", "its baseline"), ("versus_first", f"{comparison.labels[0]}'s choice")):
            if row[key] is not None:
                line += f"; vs {what} {' '.join(paired_cells(row[key]))}"
            elif key == "versus_baseline" or row is not comparison.rows[0]:
                line += f"; vs {what}: not compared ({_not_paired(row, comparison.rows[0], key)})"
        lines.append(line)
    return lines


def _not_paired(row: dict[str, Any], first: dict[str, Any], key: str) -> str:
    """Why ``row``'s choice has no paired difference in column ``key`` of :attr:`Comparison.rows`."""
    if row["seeds"] is None:
        return "no final run of its choice yet"
    if key == "versus_first" and first["seeds"] is None:
        return "no final run of that choice yet"
    return "no final run of it shares a seed with this choice's"
