"""``penalised_layers.md``/``.csv``: per setting, the median and range of its penalised layers' eval IsoScore*."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Sequence

from ..records.cells import Record
from ..records.run_extras import ResultsReader, layer_isoscores, recorded_results
from ..records.settings import collapsed_mark, setting_row, settings
from ..tables import SETTING_HEADER, markdown_table, setting_cells

COLUMNS = ("model", "task", "method", "lam", "zeta", "variant", "layers", "seeds", "score", "median", "low", "high")
CAPTION = ("Eval IsoScore* of the layers the I-STAR cells penalise (criterion.layers; hidden-state indices, 1 = the "
           "first transformer layer), each layer's mean over seeds, then the median and the range over those layers, "
           "for every setting of the model and task; `score` is the setting's mean task score (a perplexity stays "
           "one).")


def rows(records: Sequence[Record], read: ResultsReader = recorded_results) -> list[dict[str, Any]]:
    """One row per setting of every model and task whose I-STAR cells penalise chosen layers (:data:`COLUMNS`);
    ``read``: a cell's ``results.json``."""
    penalised = {(record.model, record.task): tuple(record.layers) for record in reversed(records)  # the first wins
                 if record.method == "istar" and record.layers}
    result = []
    for setting in settings(records):
        if (layers := penalised.get((setting.model, setting.task))) is None:
            continue
        per_seed = [found for run in setting.records
                    if (found := layer_isoscores(Path(run.path), layers, read)) is not None]
        if not per_seed:
            continue
        means = [statistics.fmean(column) for column in zip(*per_seed)]
        result.append({**setting_row(setting), "layers": _span(layers), "seeds": len(per_seed),
                       "score": f"{setting.mean:.2f}", "median": f"{statistics.median(means):.3g}",
                       "low": f"{min(means):.3g}", "high": f"{max(means):.3g}", "setting": setting})
    return result


def markdown(table: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table, a collapsed setting's score marked as Table 1 marks it."""
    return markdown_table((*SETTING_HEADER, "layers", "seeds", "score", "median IsoScore*", "lowest", "highest"),
                          ([*setting_cells(row), row["layers"], row["seeds"],
                            row["score"] + collapsed_mark(row["setting"]), *(row[key] for key in COLUMNS[9:])]
                           for row in table))


def _span(layers: Sequence[int]) -> str:
    """``8-21`` for a contiguous range, else the list."""
    ordered = sorted(layers)
    if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 1:
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered))
