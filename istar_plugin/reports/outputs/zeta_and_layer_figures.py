"""Figures 7 and 8 of Rudman & Eickhoff (2024) from a grid's records: I-STAR's zeta, and I-STAR on one layer.

Figure 7 needs I-STAR cells (all-layer penalty) at three or more zetas for one model, task and lambda
(``recipes/grids/figure7.yaml``); Figure 8 needs I-STAR cells penalising a single layer
(``criterion.layers=[L]``, ``recipes/grids/figure8.yaml``), drawn against the all-layer penalty and Base.
``istar-report`` draws each figure when its grid holds such cells. Scores are mean ± std over seeds; where
several settings share a point (e.g. lambdas under one layer), the best mean is shown, as in Table 1.

>>> from istar_plugin.reports.records.cells import Record
>>> records = [Record("rte", "bert", "istar", -1.0, zeta, seed, "accuracy", 0.6, 60.0 + zeta + seed, 0.1, "")
...            for zeta in (0.0, 0.4, 0.8) for seed in (1, 2)]
>>> [(zeta, round(setting.mean, 2)) for zeta, setting in figure7_points(records)["rte"]["bert", -1.0]]
[(0.0, 61.5), (0.4, 61.9), (0.8, 62.3)]
>>> figure8_points(records)
{}
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

from ..figures import MARKERS, panels, save_png, style
from ..records.cells import Record
from ..records.settings import Setting, settings

__all__ = ["figure7_points", "figure8_points", "figure7", "figure8"]

MIN_ZETAS = 3
"""Fewer zetas than this on one model, task and lambda is no zeta sweep: Figure 7 is not drawn for it."""


def _best(candidates: Sequence[Setting]) -> dict[tuple, Setting]:
    """(task, model, *extra) -> the setting with the highest mean among ``candidates`` sharing the key."""
    best: dict[tuple, Setting] = {}
    for setting in candidates:
        key = (setting.task, setting.model)
        if key not in best or setting.mean > best[key].mean:
            best[key] = setting
    return best


def figure7_points(records: Sequence[Record]) -> dict[str, dict[tuple[str, float], list[tuple[float, Setting]]]]:
    """task -> (model, lambda) -> [(zeta, setting)] in zeta order, for all-layer I-STAR series with at least
    :data:`MIN_ZETAS` zetas (the best variant at each zeta)."""
    series: dict[tuple[str, str, float], dict[float, Setting]] = {}
    for setting in settings([r for r in records if r.method == "istar" and r.layers is None and r.zeta is not None]):
        points = series.setdefault((setting.task, setting.model, setting.lam), {})
        if setting.zeta not in points or setting.mean > points[setting.zeta].mean:
            points[setting.zeta] = setting
    result: dict[str, dict[tuple[str, float], list[tuple[float, Setting]]]] = {}
    for (task, model, lam), points in sorted(series.items()):
        if len(points) >= MIN_ZETAS:
            result.setdefault(task, {})[model, lam] = sorted(points.items())
    return result


def figure8_points(records: Sequence[Record]) -> dict[tuple[str, str], dict[str, Any]]:
    """(task, model) -> ``{"layers": [(layer, setting)], "global": setting or None, "base": setting or None}``
    wherever I-STAR penalised single layers."""
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
        for marker, ((model, lam), line) in zip(MARKERS * len(series), series.items()):
            ax.errorbar([z for z, _ in line], [s.mean for _, s in line], yerr=[s.std for _, s in line], marker=marker,
                        markersize=5, capsize=3, linewidth=1.2, label=f"{model} λ={lam:g}")
        metric = next(iter(series.values()))[0][1].metric
        style(ax, f"{task}: I-STAR's ζ", "ζ (shrinkage towards Σ_S)", f"{metric} (%)")
        ax.legend(fontsize=8)
    fig.suptitle("Task performance against ζ (mean ± std over seeds)", fontsize=10)
    return save_png(fig, path)


def figure8(records: Sequence[Record], path: str | os.PathLike) -> Path:
    """Figure 8: per task and model a panel of score (mean ± std) per single penalised layer, with the all-layer
    penalty (solid line, band ± std) and Base (dashed line, band ± std) for reference."""
    points = figure8_points(records)
    if not points:
        raise ValueError("figure 8 needs I-STAR cells penalising a single layer (criterion.layers=[L]); "
                         "none were given")
    fig, axes = panels(len(points))
    for ax, ((task, model), panel) in zip(axes, points.items()):
        layers = [layer for layer, _ in panel["layers"]]
        ax.errorbar(layers, [s.mean for _, s in panel["layers"]], yerr=[s.std for _, s in panel["layers"]], fmt="o",
                    markersize=5, capsize=3, color="tab:blue", label="I-STAR on one layer")
        for name, colour, line_style, label in (("global", "tab:green", "-", "I-STAR, all layers"),
                                           ("base", "tab:gray", "--", "Base")):
            reference: Optional[Setting] = panel[name]
            if reference is not None:
                ax.axhline(reference.mean, color=colour, linestyle=line_style, linewidth=1.2, label=label)
                ax.axhspan(reference.mean - reference.std, reference.mean + reference.std, color=colour, alpha=0.12)
        ax.set_xticks(layers)
        metric = panel["layers"][0][1].metric
        style(ax, f"{model} on {task}", "penalised layer", f"{metric} (%)")
        ax.legend(fontsize=7)
    fig.suptitle("I-STAR on one layer vs all layers\n(mean ± std over seeds)", fontsize=10)
    return save_png(fig, path)
