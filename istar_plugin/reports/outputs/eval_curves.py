"""How the evaluations moved during training (``curves.md``/``.csv``), per setting and evaluated step."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Optional, Sequence

from ...storage.seeds import SeedSummary, std_over_seeds
from ..records.cells import Record, as_percent
from ..records.run_extras import evaluations, finite_number
from ..records.settings import setting_row, settings
from ..tables import SETTING_HEADER, markdown_table, setting_cells

COLUMNS = ("model", "task", "method", "lam", "zeta", "variant", "metric", "step", "seeds", "score", "score_std",
           "isoscore_star", "isoscore_star_std", "embedding_i1", "embedding_i1_std")
CAPTION = ("Evaluations over training steps of every setting evaluated at two or more steps: at each step, the seeds "
           "evaluated there and their mean ± std (— for one seed) of the task score, of eval IsoScore* and, "
           "where the cells log it, of the word-embedding matrix's I1.\n\n")
MEASURES = {"isoscore_star": "eval/isoscore_star", "embedding_i1": "eval/embedding_i1"}


def rows(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per evaluated step of each setting whose cells evaluated at two or more steps, in settings order."""
    result = []
    for setting in settings(records):
        by_step: dict[int, list[dict[str, Any]]] = {}
        for run in setting.records:
            for step, evaluation in evaluations(Path(run.path)).items():
                by_step.setdefault(step, []).append(evaluation)
        if len(by_step) < 2:
            continue
        for step, evaluated in sorted(by_step.items()):
            scores = [as_percent(setting.task, setting.metric, value)
                      for value in _values(evaluated, f"eval/{setting.metric}")]
            row = {**setting_row(setting), "metric": setting.metric, "step": step, "seeds": len(evaluated),
                   **_summary("score", scores)}
            for name, key in MEASURES.items():
                row.update(_summary(name, _values(evaluated, key)))
            result.append(row)
    return result


def markdown(table: Sequence[dict[str, Any]]) -> str:
    """The curves as a Markdown table; the I1 column only when some cell logs it."""
    with_i1 = any(row["embedding_i1"] is not None for row in table)
    header = [*SETTING_HEADER, "metric", "step", "seeds", "score", "eval IsoScore*"]
    return markdown_table(header + (["I1 (embeddings)"] if with_i1 else []), ([
        *setting_cells(row), row["metric"], row["step"], row["seeds"], _shown(row, "score", 2),
        _shown(row, "isoscore_star", 3), *([_shown(row, "embedding_i1", 3)] if with_i1 else [])] for row in table))


def _values(evaluated: Sequence[dict[str, Any]], key: str) -> list[float]:
    return [float(evaluation[key]) for evaluation in evaluated if finite_number(evaluation.get(key))]


def _summary(name: str, values: Sequence[float]) -> dict[str, Optional[float]]:
    """``name`` -> the mean (None without values), ``name_std`` -> the sample std (None with fewer than two)."""
    return {name: statistics.fmean(values) if values else None, f"{name}_std": std_over_seeds(values)}


def _shown(row: dict[str, Any], name: str, decimals: int) -> str:
    """``mean ± std`` (``mean ± —`` for one seed), ``—`` for none."""
    mean, std = row[name], row[f"{name}_std"]
    return "—" if mean is None else SeedSummary(mean, std, 0).text(f".{decimals}f")

