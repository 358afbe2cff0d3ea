"""Table 2 of Rudman & Eickhoff (2024) from a grid's records: the hyperparameters each method's best setting has
(selected as Table 1 selects, :func:`~istar_plugin.reports.records.settings.best_settings`).

>>> from istar_plugin.reports.records.cells import Record
>>> cell = lambda lam, seed, score: Record("sst2", "bert", "istar", lam, 0.2, seed, "accuracy", score / 100, score,
...                                        0.1, f"/g/{lam}{seed}")
>>> print(table2_markdown(table2([cell(-1.0, 1, 92.0), cell(-3.0, 1, 93.0)])), end="")
| Model | Task | Method | λ | ζ | mean ± std | settings compared |
|---|---|---|---|---|---|---|
| bert | sst2 | I-STAR | -3 | 0.2 | 93.00 ± 0.00 | 2 |
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from ..records.cells import Record
from ..records.settings import best_settings, display_name, setting_order

__all__ = ["COLUMNS", "table2", "table2_markdown"]

COLUMNS = ("model", "task", "method", "lam", "zeta", "variant", "mean", "std", "n", "settings_compared")


def table2(records: Sequence[Record]) -> list[dict[str, Any]]:
    """The selected hyperparameters: one row per model x task x method that has a lam, zeta or variant to choose."""
    rows = []
    for (model, task, method), (setting, compared) in sorted(best_settings(records).items(),
                                                             key=lambda item: setting_order(item[1][0])):
        if setting.lam is None and setting.zeta is None and not setting.variant:
            continue
        rows.append({"model": model, "task": task, "method": display_name(method), "lam": setting.lam,
                     "zeta": setting.zeta, "variant": setting.variant, "mean": setting.mean, "std": setting.std,
                     "n": setting.n, "settings_compared": compared})
    return rows


def table2_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Table 2 as markdown; an ``other`` column (the selected variant) appears when anything else was swept."""
    other = any(row["variant"] for row in rows)
    titles = ["Model", "Task", "Method", "λ", "ζ", *(["other"] if other else []), "mean ± std", "settings compared"]
    lines = ["| " + " | ".join(titles) + " |", "|---" * len(titles) + "|"]
    for row in rows:
        cells = [row["model"], row["task"], row["method"], _number_text(row["lam"]), _number_text(row["zeta"]),
                 *([row["variant"] or "—"] if other else []), f"{row['mean']:.2f} ± {row['std']:.2f}",
                 str(row["settings_compared"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _number_text(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:g}"


