"""Tables 1 and 2 of Rudman & Eickhoff (2024) from a grid's records, beside the paper's numbers."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from ...metrics import better_sign
from ...storage.seeds import SeedSummary
from ..comparisons.paired import LEVEL, PairedDifference
from ..comparisons.versus_base import Compare, compare
from ..paper.istar import paper_result, reported_metrics
from ..records.cells import Record
from ..records.settings import (SELECTIONS, Setting, best_settings, collapsed_mark, display_name, method_rank,
                                metric_summary, seeds_mark, setting_order, setting_row)
from ..tables import SETTING_HEADER, markdown_table, setting_cells

TABLE2_COLUMNS = ("model", "task", "method", "lam", "zeta", "variant", "mean", "std", "n", "settings_compared")

BOLD = (f"Bold: a row's best mean where it is told apart from every other column: its difference to each, paired by "
        f"seed as in versus_base.md, has a {LEVEL:.0%} interval that excludes zero over at least two seeds; a best not "
        "told apart is not bold. λ and ζ: the chosen setting of a method that has them.")
CAPTIONS = {"eval": f"Table 1: {SELECTIONS['eval']}. {BOLD}\n\n",
            "validation": f"Table 1, held out: {SELECTIONS['validation']}. {BOLD}\n\n"}
"""Selection -> the caption above Table 1 selected so (``table1.md``, ``table1_heldout.md``)."""

DISTINGUISHED = "distinguished best"  # a table1 row's key: metric -> the column whose best is told apart (BOLD)


def table1(records: Sequence[Record], selection: str = "eval", compare: Compare = compare) -> list[dict[str, Any]]:
    """Rows model x task: ``model``, ``task``, ``metric``, each method column's best :class:`Setting`, DISTINGUISHED.
    ``compare``: two settings paired by seed on a metric (default :func:`.comparisons.versus_base.compare`)."""
    best = best_settings(records, selection)
    columns = [display_name(method) for method in sorted({key[2] for key in best}, key=method_rank)]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for (model, task, method), (setting, _) in sorted(best.items(), key=lambda item: setting_order(item[1][0])):
        row = rows.setdefault((model, task), {"model": model, "task": task, "metric": setting.metric,
                                               **dict.fromkeys(columns)})
        row[display_name(method)] = setting
    for row in rows.values():
        row[DISTINGUISHED] = {metric: distinguished_best(row, metric, compare) for metric in row_metrics(row, True)}
    return list(rows.values())


def distinguished_best(row: dict[str, Any], metric: str, compare: Compare = compare) -> Optional[str]:
    """The column of ``row`` whose mean of ``metric`` is best when told apart from every other (:data:`BOLD`)."""
    ranked = sorted(((better_sign(metric) * summary.mean, column) for column in method_columns([row])
                     if (summary := metric_summary(row[column], metric)) is not None), reverse=True)
    if len(ranked) < 2:
        return None
    best = ranked[0][1]
    return best if all((paired := compare(row[best], row[other], metric)) is not None and paired.verdict == "better"
                       for _, other in ranked[1:]) else None


def method_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The method column titles of :func:`table1` rows."""
    return [key for key in rows[0] if key not in ("model", "task", "metric", DISTINGUISHED)] if rows else []


def format_score(setting: Optional[Setting], most_seeds: int, metric: Optional[str] = None,
                 paper_model: Optional[str] = None) -> str:
    """``mean ± std`` of ``metric`` (default the table metric) with its marks, then the paper's and our difference."""
    summary = metric_summary(setting, metric or (setting.metric if setting else ""))
    if summary is None or setting is None:
        return "—"
    marks = [f"{name} {value:{spec}}" for name, value, spec in (("λ", setting.lam, "+g"), ("ζ", setting.zeta, "g"))
             if value is not None] + ([seeds] if (seeds := seeds_mark(summary.n, most_seeds)) else [])
    text = summary.text(".2f") + (f" ({', '.join(marks)})" if marks else "")
    text += collapsed_mark(setting)
    paper = paper_comparison(setting, metric or setting.metric, paper_model)
    if paper is None:
        return text
    named = "" if paper[3] == setting.model else f"{paper[3]} "
    return text + f" · paper {named}{paper[0]:.2f} ± {paper[1]:.2f} ({paper[2]:+.2f})"


def row_metrics(row: dict[str, Any], everything: bool = False) -> list[str]:
    """The metrics a Table 1 row is shown in: the paper's for its task, and with ``everything`` every other one."""
    available = [name for column in method_columns([row]) if row[column] is not None
                 for name in row[column].metric_names()]
    reported = [name for name in reported_metrics(row["task"], row["metric"]) if name in available]
    others = sorted(set(available) - set(reported)) if everything else []
    return reported + others


def table1_markdown(rows: Sequence[dict[str, Any]], versus_base: Callable[[Setting], Any] = lambda setting: None,
                    paper_model: Optional[str] = None) -> str:
    """Table 1 as a markdown table, one line per reported metric, the row's :data:`DISTINGUISHED` best in bold.
    ``paper_model``: whose paper numbers stand beside a model the paper did not run."""
    columns = method_columns(rows)
    most_seeds = max((s.n for row in rows for s in map(row.get, columns) if s), default=0)
    lines = []
    for row in rows:
        for metric in row_metrics(row):
            cells = []
            for column in columns:
                text = format_score(row[column], most_seeds, metric, paper_model)
                paired = versus_base(row[column]) if row[column] is not None and metric == row[column].metric else None
                text += f" · Δ {paired.text()}{paired_seeds(paired, row[column])}" if paired is not None else ""
                cells.append(f"**{text}**" if row.get(DISTINGUISHED, {}).get(metric) == column else text)
            lines.append([row["model"], row["task"], metric, *cells])
    return markdown_table(["Model", "Task", "Metric", *columns], lines)


def paired_seeds(paired: PairedDifference, setting: Setting) -> str:
    """`` (K of N seeds)`` when ``paired`` is over K of the N seeds of ``setting``'s mean (its Base lacks the others),
    else ``""``."""
    return f" ({len(paired.seeds)} of {setting.n} seeds)" if len(paired.seeds) < setting.n else ""


def table1_csv_rows(rows: Sequence[dict[str, Any]], paper_model: Optional[str] = None) -> list[dict[str, Any]]:
    """Table 1 flattened, one row per metric (``reported``: the paper's Table 1 shows it)."""
    flat = []
    for row in rows:
        reported = row_metrics(row)
        for metric in row_metrics(row, everything=True):
            out = {"model": row["model"], "task": row["task"], "metric": metric, "reported": metric in reported}
            for column in method_columns(rows):
                setting = row[column]
                summary = metric_summary(setting, metric)
                paper = paper_comparison(setting, metric, paper_model)
                values = {"mean": summary and summary.mean, "std": summary and summary.std, "n": summary and summary.n,
                          **{name: getattr(setting, name, None) for name in ("lam", "zeta", "variant")},
                          "paper mean": paper and paper[0], "paper std": paper and paper[1],
                          "difference": paper and paper[2], "paper model": paper and paper[3]}
                out.update({f"{column} {name}": value for name, value in values.items()})
            flat.append(out)
    return flat


def table2(records: Sequence[Record]) -> list[dict[str, Any]]:
    """The selected hyperparameters: one row per model x task x method that has a lam, zeta or variant to choose
    (``setting``: the chosen :class:`Setting`)."""
    return [{**setting_row(setting), "mean": setting.mean, "std": setting.std, "n": setting.n,
             "settings_compared": compared, "setting": setting}
            for setting, compared in sorted(best_settings(records).values(), key=lambda best: setting_order(best[0]))
            if setting.lam is not None or setting.zeta is not None or setting.variant]


def table2_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Table 2 as markdown, each mean marked as Table 1 marks a collapsed setting's; an ``other`` column (the selected
    variant) appears when anything else was swept."""
    shown = 6 if any(row["variant"] for row in rows) else 5
    return markdown_table([*SETTING_HEADER[:shown], "mean ± std", "settings compared"], ([
        *setting_cells(row)[:shown],
        SeedSummary(row["mean"], row["std"], row["n"]).text(".2f") + collapsed_mark(row["setting"]),
        row["settings_compared"]] for row in rows))


def paper_comparison(setting: Optional[Setting], metric: str, paper_model: Optional[str] = None
                     ) -> Optional[tuple[float, float, float, str]]:
    """``(paper mean, paper std, ours - paper, paper model)`` where the paper (or ``paper_model``) has it."""
    ours = metric_summary(setting, metric)
    if ours is None or setting is None:
        return None
    for model in (setting.model, paper_model):
        if model is not None and (paper := paper_result(model, setting.method, setting.task, metric)) is not None:
            return paper[0], paper[1], ours.mean - paper[0], model
    return None
