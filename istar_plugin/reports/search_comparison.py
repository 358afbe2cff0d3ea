"""``istar-report SEARCH_A SEARCH_B [...] --out DIR``: searches of one task side by side (``searches.md/.csv``,
``searches.png``).

>>> rows = [{"search": "grid", "sampler": "grid", "pruner": "none", "trials": "24 finished, 0 pruned, 0 failed",
...          "steps": 4896, "hours": 1.62, "chosen": "trial 7", "values": "criterion.lam=-1", "held_out": 85.0,
...          "seeds": 5, "mean": 84.1, "versus_baseline": None, "versus_first": None}]
>>> print(searches_table(rows, "accuracy", "grid"), end="")  # doctest: +NORMALIZE_WHITESPACE
| search | sampler, pruner | trials | optimizer steps | trial hours | chosen | held-out accuracy | eval mean (seeds) |
 Δ vs its baseline | 95% interval | verdict | Δ vs grid's choice | 95% interval | verdict |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| grid | grid, none | 24 finished, 0 pruned, 0 failed | 4896 | 1.6 | trial 7: criterion.lam=-1 | 85.00 | 84.10 (5) |
 — | — | — | — | — | — |
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import ConfigError
from ..storage.results import read_results
from .comparisons.paired import LEVEL, signed
from .figures import save_png, single
from .records.cells import Record
from .records.searches import STATES, Search
from .search_report import against_baseline, chosen_rows, final_runs, paired_cells, shown
from .tables import Table, markdown_table, write_table

FIGURE = "searches.png"


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
        return search_rows(self)


def compare_searches(searches: Sequence[Search]) -> Comparison:
    """The searches as a :class:`Comparison`: at least two, of one task; else one ConfigError line."""
    if len(searches) < 2:
        raise ConfigError("comparing searches needs two or more search directories")
    tasks = sorted({search.task for search in searches})
    if len(tasks) > 1:
        raise ConfigError(f"searches of different tasks ({', '.join(tasks)}) are not compared: their choices are "
                          "scored on different metrics")
    return Comparison(searches)


def trial_steps(search: Search, number: int) -> Optional[int]:
    """The optimizer steps the trial's runs trained (a stopped run's to where it stopped); None when none recorded."""
    steps = []
    for run in search.runs(number):
        results = read_results(run, strict=False)
        if results is not None and results.step is not None:
            steps.append(results.step)
    return sum(steps) if steps else None


def _ended(search: Search) -> list:
    return sorted((trial for trial in search.trials if trial.datetime_complete is not None),
                  key=lambda trial: trial.datetime_complete)


def search_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """One row per search: what it trained, its choice, and the choice against its baseline and the first's."""
    first: Optional[list[Record]] = None
    rows = []
    for index, (label, search) in enumerate(zip(comparison.labels, comparison.searches)):
        ended = _ended(search)
        hours = sum(search.wall_seconds(trial) or 0 for trial in ended) / 3600
        steps = [trial_steps(search, trial.number) for trial in search.trials]
        chosen = (chosen_rows(search) or [None])[0]
        runs = [replace(record, variant=f"{label}: {record.variant}")
                for record in (final_runs(search).get(chosen["setting"], []) if chosen else [])]
        if index == 0:
            first = runs
        rows.append({"search": label, "sampler": search.spec.sampler, "pruner": search.spec.pruner,
                     "trials": search.counts(), "steps": sum(step for step in steps if step is not None),
                     "hours": hours,
                     "chosen": None if chosen is None else f"trial {search.best.number}",
                     "values": None if chosen is None else chosen["values"],
                     "held_out": None if chosen is None else chosen["held_out"],
                     "seeds": len(runs) or None, "mean": None if chosen is None else chosen["mean"],
                     "versus_baseline": None if chosen is None else chosen["paired"],
                     "versus_first": None if index == 0 else against_baseline(runs, first or [])})
    return rows


def searches_table(rows: Sequence[dict[str, Any]], metric: str, first: str) -> str:
    """The searches side by side (:func:`search_rows`) as a Markdown table."""
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
    def values(key: str) -> str:
        return ", ".join(f"{label} {overrides.get(key, 'unset')}" for label, overrides in zip(comparison.labels, fixed))

    return f"Their trials' runs differ beyond the values searched, in: {'; '.join(f'{k} ({values(k)})' for k in keys)}."


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
            paired = row[key]
            item.update({f"{key}_{name}": getattr(paired, field, None) for name, field in (
                ("difference", "mean"), ("low", "low"), ("high", "high"), ("verdict", "verdict"))})
            item[f"{key}_seeds"] = None if paired is None else len(paired.seeds)
        flat.append(item)
    return flat


TABLES = (Table("searches", rows=lambda comparison: comparison.rows, caption=_caption, always=True,
                markdown=lambda comparison, rows: searches_table(rows, comparison.searches[0].metric,
                                                                 comparison.labels[0]),
                csv_rows=_csv_rows),)


def progress_points(search: Search) -> list[tuple[int, float]]:
    """(steps trained so far, best held-out score so far, percent) after each finished trial, as they ended."""
    trained, best, points = 0, None, []
    for trial in _ended(search):
        trained += trial_steps(search, trial.number) or 0
        if STATES[trial.state] == "finished":
            score = search.percent(trial.value)
            best = score if search.improves(score, best) else best
            points.append((trained, best))
    return points


def _draw(comparison: Comparison, path: Path) -> Path:
    search = comparison.searches[0]
    fig, ax = single(f"Searches of {search.task}: the best held-out {search.metric} so far", "optimizer steps trained "
                     "by the search's trials", f"best held-out {search.metric}")
    for label, each in zip(comparison.labels, comparison.searches):
        points = progress_points(each)
        if points:
            ax.step(*zip(*points), where="post", marker="o", markersize=3, label=label)
    ax.legend(fontsize=8)
    return save_png(fig, path)


def write_report(comparison: Comparison, out: Path) -> None:
    """``searches.md/.csv`` and ``searches.png`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for table in TABLES:
        write_table(table, comparison, out)
    _draw(comparison, out / FIGURE)


def summary(comparison: Comparison) -> list[str]:
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
            paired = row[key]
            if paired is not None:
                line += (f"; vs {what} {signed(paired.mean)} [{signed(paired.low)}, {signed(paired.high)}] "
                         f"{paired.verdict}")
        lines.append(line)
    return lines
