"""What a grid's paired comparisons could detect (each interval's half-width), and how many seeds would decide the
paper's reported gains with 80% power at the 95% level if each seed varies as the grid's did (a rough floor;
docs/architecture.md, "Paired comparisons"): ``power.md``/``.csv``.

>>> seeds_to_decide(1.0, 5, 1.0), seeds_to_decide(1.0, 5, 0.29), seeds_to_decide(0.3, 5, 1.23)
(11, 122, 2)
>>> from .paired import PairedDifference
>>> half_width(PairedDifference((1, 2, 3), (-1.0, 0.5, 1.0), -1.0, 1.4, "seeds and examples"))
1.2
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from ..paper.istar import PAPER_MODELS, paper_result
from ..tables import markdown_table, number_text
from .paired import PairedDifference, signed

__all__ = ["COLUMNS", "CAPTION", "POWER", "half_width", "seeds_to_decide", "paper_gains", "rows", "markdown"]

POWER = 0.80
"""The chance of deciding an effect that :func:`seeds_to_decide` plans for."""

_Z_LEVEL, _Z_POWER = 1.959964, 0.841621  # standard normal quantiles at 0.975 and at POWER

COLUMNS = ("model", "task", "method", "lam", "zeta", "variant", "metric", "seeds", "difference", "half_width",
           "verdict", "paper_model", "paper_gain", "seeds_to_decide")
CAPTION = ("What the grid could detect: each setting's interval half-width against Base (the smallest effect its "
           "seeds tell from none) and, beside each of the paper's reported gains (Table 1, I-STAR or CosReg minus "
           f"Base), the seeds that would decide that gain with {POWER:.0%} power at the 95% level if each seed varies "
           "as here: `ceil(n * (half-width * 2.80 / (1.96 * gain))^2)`, from two seeds up. A rough floor: few seeds "
           "estimate the spread loosely.\n\n")


def half_width(paired: PairedDifference) -> float:
    """Half the width of the paired interval, in the metric's points."""
    return (paired.high - paired.low) / 2


def seeds_to_decide(width: float, seeds: int, effect: float) -> Optional[int]:
    """Seeds that would decide ``effect`` with :data:`POWER`, from a half-width ``width`` measured on ``seeds``;
    None for no effect to decide, an interval of no width, or a single seed (how seeds vary is then unknown: its
    interval, from its examples alone, says nothing of that)."""
    if effect == 0 or width <= 0 or seeds < 2:
        return None
    return max(2, math.ceil(seeds * (width * (_Z_LEVEL + _Z_POWER) / (_Z_LEVEL * abs(effect))) ** 2))


def paper_gains(method: str, task: str, metric: str) -> list[tuple[str, float]]:
    """``(paper model, method minus Base)`` for each model of the I-STAR paper's Table 1 that reports both."""
    gains = []
    for model in PAPER_MODELS:
        ours, base = paper_result(model, method, task, metric), paper_result(model, "cross_entropy", task, metric)
        if ours is not None and base is not None:
            gains.append((model, round(ours[0] - base[0], 2)))
    return gains


def rows(comparisons: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting of ``comparisons`` (:func:`.versus_base.comparisons`) and paper model with a reported gain
    (one row with no paper model where the paper reports none): :data:`COLUMNS`."""
    table = []
    for row in comparisons:
        paired, setting = row["paired"], row["setting"]
        width = half_width(paired)
        common = {key: row[key] for key in COLUMNS[:9]} | {"half_width": width, "verdict": row["verdict"]}
        gains = paper_gains(setting.method, setting.task, setting.metric) or [(None, None)]
        for model, gain in gains:
            table.append(common | {"paper_model": model, "paper_gain": gain,
                                   "seeds_to_decide": None if gain is None else seeds_to_decide(width, row["seeds"],
                                                                                                gain)})
    return table


def markdown(table: Sequence[dict[str, Any]]) -> str:
    """The power table in Markdown: one line per setting, the paper's gains and the seeds each needs side by side."""
    settings: dict[tuple, list[dict[str, Any]]] = {}
    for row in table:
        settings.setdefault(tuple(row[key] for key in COLUMNS[:7]), []).append(row)
    lines = []
    for group in settings.values():
        row, papers = group[0], [r for r in group if r["paper_model"] is not None]
        gains = "; ".join(f"{signed(r['paper_gain'])} ({PAPER_MODELS[r['paper_model']]})" for r in papers) or "—"
        needed = "; ".join("—" if r["seeds_to_decide"] is None else str(r["seeds_to_decide"]) for r in papers) or "—"
        lines.append([row["model"], row["task"], row["method"], number_text(row["lam"]), number_text(row["zeta"]),
                      row["variant"] or "—", row["seeds"], signed(row["difference"]), f"{row['half_width']:.2f}",
                      row["verdict"], gains, needed])
    return markdown_table(("Model", "Task", "Method", "λ", "ζ", "other", "seeds", "Δ vs Base", "± half-width",
                           "verdict", "paper's gain (model)", "seeds to decide it"), lines)
