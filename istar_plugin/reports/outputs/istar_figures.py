"""Figures 3, 7 and 8 of Rudman & Eickhoff (2024) from a grid's records, each drawn when the grid holds cells for it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..comparisons import versus_base
from ..figures import DPI, MARKERS, panels, pyplot, save_png, style
from ..records.cells import SHOWN_AS_STORED, Record
from ..records.settings import Setting, best_of, collapsed_mark, seeds_mark, settings

COLLAPSED = "collapsed: seeds that predicted one class on the evaluation split (K collapsed beside the point)"
"""The legend entry of the cross a figure draws over the point of a setting with collapsed seeds."""


def point_marks(setting: Setting, most_seeds: int) -> str:
    """What a figure writes beside ``setting``'s point, as Table 1 beside its score: `` (n=K)`` when its K seeds are
    one or fewer than the ``most_seeds`` of its panel (:func:`.settings.seeds_mark`), `` (K collapsed)`` when K of them
    predicted one class (:func:`.settings.collapsed_mark`); ``""`` for neither."""
    seeds = seeds_mark(setting.n, most_seeds)
    return (f" ({seeds})" if seeds else "") + collapsed_mark(setting)


def _cross(ax, points: Sequence[tuple[float, float]], label: str = "_nolegend_") -> None:
    """A black cross over each of ``points``: the points of settings with collapsed seeds."""
    if points:
        ax.plot(*zip(*points), linestyle="none", marker="x", markersize=9, markeredgewidth=1.6, color="black",
                zorder=5, label=label)


def _note(ax, text: str, x: float, y: float, colour) -> None:
    """``text`` beside the point (x, y), in its series' colour."""
    ax.annotate(text, (x, y), xytext=(5, 4), textcoords="offset points", fontsize=8, color=colour,
                fontweight="bold", zorder=4, bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.75))


def _best(candidates: Sequence[Setting], key: Callable[[Setting], Optional[tuple]] = lambda s: (s.task, s.model)
          ) -> dict[tuple, Setting]:
    """``key(setting)`` -> the best setting (:func:`.settings.best_of`) among ``candidates`` sharing it (None: left
    out)."""
    groups: dict[tuple, list[Setting]] = {}
    for setting in candidates:
        if (k := key(setting)) is not None:
            groups.setdefault(k, []).append(setting)
    return {k: best_of(group) for k, group in groups.items()}


def figure3_points(records: Sequence[Record]) -> dict[str, dict[str, list[tuple[float, Setting]]]]:
    """task -> model -> [(lambda, setting)] in lambda order, cross_entropy as lambda 0 unless I-STAR ran it."""
    lam = {"istar": lambda s: s.lam, "cross_entropy": lambda s: 0.0}
    best = _best(settings(records), lambda s: (s.task, s.model, s.method, lam[s.method](s))
                 if s.method in lam and lam[s.method](s) is not None else None)  # an I-STAR cell without a lambda
    per_lambda = {(task, model, lam): setting for (task, model, method, lam), setting
                  in sorted(best.items(), key=lambda item: item[0][2] == "istar")}  # I-STAR's own lambda 0 wins
    with_istar = {task for (task, _, method, _) in best if method == "istar"}  # Base alone is no lambda sweep
    points: dict[str, dict[str, list[tuple[float, Setting]]]] = {}
    for (task, model, lam), setting in sorted(per_lambda.items()):
        if task in with_istar:
            points.setdefault(task, {}).setdefault(model, []).append((lam, setting))
    return points


def figure3(records: Sequence[Record], path: str | os.PathLike, paired: Optional[Sequence[dict[str, Any]]] = None
            ) -> Path:
    """Figure 3, one row per task: eval IsoScore* against score per lambda, beside each lambda's difference to Base.
    ``paired``: the records' :func:`.comparisons.versus_base.comparisons` (computed from them when not given)."""
    points = figure3_points(records)
    if not points:
        raise ValueError("figure 3 needs finished I-STAR cells; none were given")
    plt = pyplot()
    paired = versus_base.comparisons(records) if paired is None else paired
    models = sorted({model for per_model in points.values() for model in per_model})
    colours = {model: plt.cm.tab10(i % 10) for i, model in enumerate(models)}
    markers = {model: MARKERS[i % len(MARKERS)] for i, model in enumerate(models)}
    fig, axes = plt.subplots(len(points), 2, figsize=(10.0, 1.3 + 3.6 * len(points)), dpi=DPI, squeeze=False,
                             layout="constrained")
    metric_of = {record.task: record.metric for record in records}
    for (ax, ax_delta), (task, per_model) in zip(axes, points.items()):
        lambdas = [lam for series in per_model.values() for lam, _ in series]
        step = 0.03 * ((max(lambdas) - min(lambdas)) or 1.0)  # models at one lambda sit side by side
        most_seeds = max(setting.n for series in per_model.values() for _, setting in series)
        for rank, (model, series) in enumerate(per_model.items()):
            _plot_series(ax, series, colours[model], markers[model], model, most_seeds)
            _plot_differences(ax_delta, series, paired, colours[model], markers[model],
                              step * (rank - (len(per_model) - 1) / 2), most_seeds)
        percent = metric_of[task] not in SHOWN_AS_STORED.get(task, ())  # a perplexity is no percentage
        style(ax, f"{task} ({metric_of[task]})", "eval IsoScore*", metric_of[task] + (" (%)" if percent else ""),
              title_size=11)
        ax.margins(0.15)
        style(ax_delta, f"{task}: I-STAR − Base, paired by seed", "λ",
              f"Δ {metric_of[task]}" + (" (points)" if percent else ""), title_size=11)
        ax_delta.axhline(0.0, color="0.35", linewidth=0.9)
        ax_delta.margins(0.15)
    handles = [plt.Line2D([], [], color=colours[m], marker=markers[m], linestyle="-", label=m) for m in models]
    if any(setting.collapsed for per_model in points.values() for line in per_model.values() for _, setting in line):
        handles.append(plt.Line2D([], [], color="black", marker="x", markersize=9, markeredgewidth=1.6,
                                  linestyle="none", label=COLLAPSED))
    fig.suptitle("Task performance vs eval IsoScore*, one point per I-STAR λ (labels; λ = 0 is Base): mean ± std "
                 "over seeds\nright: difference to Base, paired by seed, with its 95% bootstrap interval as in "
                 "versus_base.md (filled: the interval excludes 0)", fontsize=10)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(models), 6), fontsize=9, frameon=False)
    return save_png(fig, path)


def _plot_differences(ax, series: list[tuple[float, Setting]], paired: Sequence[dict], colour, marker: str,
                      dodge: float, most_seeds: int) -> None:
    """Each lambda's paired difference to Base and its interval, drawn ``dodge`` to the right of its lambda, with its
    setting's :func:`point_marks`."""
    collapsed = []
    for lam, setting in series:
        if (difference := versus_base.comparison_of(paired, setting)) is None:
            continue
        ax.errorbar([lam + dodge], [difference.mean], fmt="none", ecolor=colour, elinewidth=1.1, capsize=3,
                    yerr=[[difference.mean - difference.low], [difference.high - difference.mean]])
        filled = difference.decided
        ax.plot([lam + dodge], [difference.mean], linestyle="none", marker=marker, markersize=6, color=colour,
                markerfacecolor=colour if filled else "white", markeredgecolor=colour, zorder=3)
        if marks := point_marks(setting, most_seeds):
            _note(ax, marks.strip(), lam + dodge, difference.mean, colour)
        if setting.collapsed:
            collapsed.append((lam + dodge, difference.mean))
    _cross(ax, collapsed)


def _plot_series(ax, series: list[tuple[float, Setting]], colour, marker: str, model: str, most_seeds: int) -> None:
    """One model's points, each labelled with its lambda and :func:`point_marks`."""
    xs = [setting.isoscore_mean for _, setting in series]
    ys = [setting.mean for _, setting in series]
    ax.plot(xs, ys, color=colour, linewidth=0.8, alpha=0.5)
    ax.errorbar(xs, ys, xerr=[s.isoscore_std or 0.0 for _, s in series], yerr=[s.std or 0.0 for _, s in series],
                fmt="none", ecolor=colour, elinewidth=0.9, capsize=2.5, alpha=0.8)
    ax.plot(xs, ys, linestyle="none", marker=marker, color=colour, markersize=5.5, markeredgecolor="white",
            markeredgewidth=0.6, zorder=3, label=model)
    for (lam, setting), x, y in zip(series, xs, ys):
        _note(ax, f"{lam:g}{point_marks(setting, most_seeds)}", x, y, colour)
    _cross(ax, [(x, y) for (_, setting), x, y in zip(series, xs, ys) if setting.collapsed])


MIN_ZETAS = 3  # fewer zetas on one model, task and lambda is no zeta sweep: Figure 7 is not drawn for it


def figure7_points(records: Sequence[Record]) -> dict[str, dict[tuple[str, float], list[tuple[float, Setting]]]]:
    """task -> (model, lambda) -> [(zeta, setting)] for all-layer I-STAR series with at least :data:`MIN_ZETAS`."""
    series: dict[tuple[str, str, float], dict[float, Setting]] = {}
    chosen = [r for r in records if r.method == "istar" and r.layers is None and r.zeta is not None]
    for (task, model, lam, zeta), setting in _best(settings(chosen), lambda s: (s.task, s.model, s.lam, s.zeta)
                                                    ).items():
        series.setdefault((task, model, lam), {})[zeta] = setting
    result: dict[str, dict[tuple[str, float], list[tuple[float, Setting]]]] = {}
    for (task, model, lam), points in sorted(series.items()):
        if len(points) >= MIN_ZETAS:
            result.setdefault(task, {})[model, lam] = sorted(points.items())
    return result


def figure8_points(records: Sequence[Record]) -> dict[tuple[str, str], dict[str, Any]]:
    """(task, model) -> ``{"layers": [(layer, setting)], "global": ..., "base": ...}`` where I-STAR penalised one."""
    single = sorted({r.layers for r in records if r.method == "istar" and r.layers is not None and len(r.layers) == 1})
    result: dict[tuple[str, str], dict[str, Any]] = {}
    for layers in single:
        chosen = [r for r in records if r.method == "istar" and r.layers == layers]
        for key, setting in _best(settings(chosen)).items():
            result.setdefault(key, {"layers": [], "global": None, "base": None})["layers"].append((layers[0], setting))
    for name, method in (("global", "istar"), ("base", "cross_entropy")):
        chosen = [r for r in records if r.method == method and r.layers is None and (r.task, r.model) in result]
        for key, setting in _best(settings(chosen)).items():
            result[key][name] = setting
    return dict(sorted(result.items()))


def figure7(records: Sequence[Record], path: str | os.PathLike) -> Path:
    """Figure 7: per task a panel of score (mean ± std over seeds) against zeta, one line per model and lambda."""
    points = figure7_points(records)
    if not points:
        raise ValueError(f"figure 7 needs all-layer I-STAR cells at {MIN_ZETAS} or more zetas; none were given")
    fig, axes = panels(len(points))
    for ax, (task, series) in zip(axes, points.items()):
        most_seeds = max(setting.n for line in series.values() for _, setting in line)
        collapsed = []
        for marker, ((model, lam), line) in zip(MARKERS * len(series), series.items()):
            drawn = ax.errorbar([z for z, _ in line], [s.mean for _, s in line], yerr=[s.std or 0.0 for _, s in line],
                                marker=marker, markersize=5, capsize=3, linewidth=1.2, label=f"{model} λ={lam:g}")
            for zeta, setting in line:
                if marks := point_marks(setting, most_seeds):
                    _note(ax, marks.strip(), zeta, setting.mean, drawn.lines[0].get_color())
            collapsed += [(zeta, setting.mean) for zeta, setting in line if setting.collapsed]
        _cross(ax, collapsed, COLLAPSED)
        style(ax, f"{task}: I-STAR's ζ", "ζ (shrinkage towards Σ_S)", f"{next(iter(series.values()))[0][1].metric} (%)")
        ax.legend(fontsize=8)
    fig.suptitle("Task performance against ζ (mean ± std over seeds)", fontsize=10)
    return save_png(fig, path)


def figure8(records: Sequence[Record], path: str | os.PathLike) -> Path:
    """Figure 8: per task and model the score per single penalised layer, beside the all-layer penalty and Base."""
    points = figure8_points(records)
    if not points:
        raise ValueError("figure 8 needs I-STAR cells penalising a single layer (criterion.layers=[L]); "
                         "none were given")
    fig, axes = panels(len(points))
    for ax, ((task, model), panel) in zip(axes, points.items()):
        layers = [layer for layer, _ in panel["layers"]]
        most_seeds = max(setting.n for setting in [*(s for _, s in panel["layers"]), panel["global"], panel["base"]]
                         if setting is not None)
        ax.errorbar(layers, [s.mean for _, s in panel["layers"]], yerr=[s.std or 0.0 for _, s in panel["layers"]],
                    fmt="o", markersize=5, capsize=3, color="tab:blue", label="I-STAR on one layer")
        for layer, setting in panel["layers"]:
            if marks := point_marks(setting, most_seeds):
                _note(ax, marks.strip(), layer, setting.mean, "tab:blue")
        _cross(ax, [(layer, setting.mean) for layer, setting in panel["layers"] if setting.collapsed], COLLAPSED)
        for name, colour, line_style, label in (("global", "tab:green", "-", "I-STAR, all layers"),
                                           ("base", "tab:gray", "--", "Base")):
            if (reference := panel[name]) is not None:
                ax.axhline(reference.mean, color=colour, linestyle=line_style, linewidth=1.2,
                           label=label + point_marks(reference, most_seeds))
                spread = reference.std or 0.0
                ax.axhspan(reference.mean - spread, reference.mean + spread, color=colour, alpha=0.12)
        ax.set_xticks(layers)
        style(ax, f"{model} on {task}", "penalised layer", f"{panel['layers'][0][1].metric} (%)")
        ax.legend(fontsize=7)
    fig.suptitle("I-STAR on one layer vs all layers\n(mean ± std over seeds)", fontsize=10)
    return save_png(fig, path)
