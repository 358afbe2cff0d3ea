"""Figure 3 of Rudman & Eickhoff (2024): per task, eval IsoScore* against the score, one point per I-STAR lambda.

Drawn by ``istar-report`` when the grid holds finished I-STAR cells (:func:`figure3_points` is empty otherwise);
Base (cross_entropy) is lambda 0. Beside each task's panel, each lambda's paired difference to Base with the
interval of :mod:`..comparisons.versus_base` (the same numbers as ``versus_base.md``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ..comparisons import versus_base
from ..figures import DPI, MARKERS, pyplot, save_png, style
from ..records.cells import SHOWN_AS_STORED, Record
from ..records.settings import Setting, settings

__all__ = ["figure3_points", "figure3"]

def figure3_points(records: Sequence[Record]) -> dict[str, dict[str, list[tuple[float, Setting]]]]:
    """task -> model -> [(lambda, setting)] in lambda order: every I-STAR lambda (at its best zeta and variant
    when several were run) and cross_entropy (its best variant) as lambda 0 unless I-STAR ran lambda 0 itself;
    only tasks on which I-STAR ran (empty: no figure to draw)."""
    best: dict[tuple[str, str, str, float], Setting] = {}  # (task, model, method, lambda) -> best setting
    for setting in settings(records):
        lam = setting.lam if setting.method == "istar" else 0.0 if setting.method == "cross_entropy" else None
        key = (setting.task, setting.model, setting.method, lam)
        if lam is not None and (key not in best or setting.mean > best[key].mean):
            best[key] = setting
    per_lambda = {(task, model, lam): setting for (task, model, method, lam), setting
                  in sorted(best.items(), key=lambda item: item[0][2] == "istar")}  # I-STAR's own lambda 0 wins
    with_istar = {task for (task, _, method, _) in best if method == "istar"}  # Base alone is no lambda sweep
    points: dict[str, dict[str, list[tuple[float, Setting]]]] = {}
    for (task, model, lam), setting in sorted(per_lambda.items()):
        if task in with_istar:
            points.setdefault(task, {}).setdefault(model, []).append((lam, setting))
    return points


def figure3(records: Sequence[Record], path: str | os.PathLike) -> Path:
    """Figure 3, one row per task: left, eval IsoScore* (x) against score (y), one point per lambda and model, error
    bars one std over seeds on both axes, each point labelled with its lambda; right, each lambda's difference to
    Base paired by seed with its 95% bootstrap interval (:mod:`..comparisons.versus_base`; filled: the interval
    excludes 0). Written as PNG."""
    points = figure3_points(records)
    if not points:
        raise ValueError("figure 3 needs finished I-STAR cells; none were given")
    plt = pyplot()
    paired = versus_base.comparisons(records)
    models = sorted({model for per_model in points.values() for model in per_model})
    colours = {model: plt.cm.tab10(i % 10) for i, model in enumerate(models)}
    markers = {model: MARKERS[i % len(MARKERS)] for i, model in enumerate(models)}
    fig, axes = plt.subplots(len(points), 2, figsize=(10.0, 1.3 + 3.6 * len(points)), dpi=DPI, squeeze=False,
                             layout="constrained")
    metric_of = {record.task: record.metric for record in records}
    for (ax, ax_delta), (task, per_model) in zip(axes, points.items()):
        lambdas = [lam for series in per_model.values() for lam, _ in series]
        step = 0.03 * ((max(lambdas) - min(lambdas)) or 1.0)  # models at one lambda sit side by side
        for rank, (model, series) in enumerate(per_model.items()):
            _plot_series(ax, series, colours[model], markers[model], model)
            _plot_differences(ax_delta, series, paired, colours[model], markers[model],
                              step * (rank - (len(per_model) - 1) / 2))
        percent = metric_of[task] not in SHOWN_AS_STORED.get(task, ())  # a perplexity is no percentage
        style(ax, f"{task} ({metric_of[task]})", "eval IsoScore*", metric_of[task] + (" (%)" if percent else ""),
              title_size=11)
        ax.margins(0.15)
        style(ax_delta, f"{task}: I-STAR − Base, paired by seed", "λ",
              f"Δ {metric_of[task]}" + (" (points)" if percent else ""), title_size=11)
        ax_delta.axhline(0.0, color="0.35", linewidth=0.9)
        ax_delta.margins(0.15)
    handles = [plt.Line2D([], [], color=colours[m], marker=markers[m], linestyle="-", label=m) for m in models]
    fig.suptitle("Task performance vs eval IsoScore*, one point per I-STAR λ (labels; λ = 0 is Base): mean ± std "
                 "over seeds\nright: difference to Base, paired by seed, with its 95% bootstrap interval as in "
                 "versus_base.md (filled: the interval excludes 0)", fontsize=10)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(models), 6), fontsize=9, frameon=False)
    return save_png(fig, path)


def _plot_differences(ax, series: list[tuple[float, Setting]], paired: list[dict], colour, marker: str,
                      dodge: float) -> None:
    """Each lambda's paired difference to Base and its interval, drawn ``dodge`` to the right of its lambda."""
    for lam, setting in series:
        difference = versus_base.comparison_of(paired, setting)
        if difference is None:
            continue
        ax.errorbar([lam + dodge], [difference.mean], fmt="none", ecolor=colour, elinewidth=1.1, capsize=3,
                    yerr=[[difference.mean - difference.low], [difference.high - difference.mean]])
        filled = difference.verdict in ("better", "worse")
        ax.plot([lam + dodge], [difference.mean], linestyle="none", marker=marker, markersize=6, color=colour,
                markerfacecolor=colour if filled else "white", markeredgecolor=colour, zorder=3)


def _plot_series(ax, series: list[tuple[float, Setting]], colour, marker: str, model: str) -> None:
    xs = [setting.isoscore_mean for _, setting in series]
    ys = [setting.mean for _, setting in series]
    ax.plot(xs, ys, color=colour, linewidth=0.8, alpha=0.5)
    ax.errorbar(xs, ys, xerr=[s.isoscore_std for _, s in series], yerr=[s.std for _, s in series], fmt="none",
                ecolor=colour, elinewidth=0.9, capsize=2.5, alpha=0.8)
    ax.plot(xs, ys, linestyle="none", marker=marker, color=colour, markersize=5.5, markeredgecolor="white",
            markeredgewidth=0.6, zorder=3, label=model)
    for lam, x, y in zip((lam for lam, _ in series), xs, ys):
        ax.annotate(f"{lam:g}", (x, y), xytext=(5, 4), textcoords="offset points", fontsize=8, color=colour,
                    fontweight="bold", zorder=4, bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.75))
