"""The sentence-embedding tables: ``istar-embed``'s ``embeddings.md`` and a grid's ``sentence_embeddings.md``."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Optional, Sequence

from ...metrics import undefined_text
from ...storage.exports import EXPORT_RECORD
from ...storage.seeds import over_seeds
from ..comparisons.paired import paired_difference
from ..comparisons.versus_base import BASE
from ..records.cells import Record
from ..records.run_extras import ResultsReader, recorded_results, sentence_embeddings
from ..records.settings import display_name, setting_key
from ..tables import markdown_table as _markdown_table, number_text

TABLE_FILE = "embeddings.md"  # istar-embed's file of markdown_table in its --out folder
TABLE_COLUMNS = (("spearman", ".2f"), ("isoscore", ".4f"), ("isoscore_star", ".4f"), ("average_cosine", ".3f"),
                 ("i1", ".3f"), ("ev_1", ".3f"), ("rankme", ".1f"), ("alignment", ".3f"), ("uniformity", ".3f"))
"""The markdown table's measures after its layer and transform columns, and their formats."""


def markdown_table(results: dict[int, dict[str, dict[str, float]]]) -> str:
    """One row per (layer, transform) of ``results[layer][transform]``, in their order."""
    header = ("layer", "transform", "Spearman x100", "IsoScore", "IsoScore*", "avg cos", "I1", "EV_1", "RankMe",
              "align", "uniform")
    return _markdown_table(header, ([layer, name, *(undefined_text(m, name_, spec) for name_, spec in TABLE_COLUMNS)]
                                    for layer, by_transform in results.items() for name, m in by_transform.items()))


def unfinished_note(scored: Optional[dict[str, Any]]) -> str:
    """What says that ``istar-embed`` scored a model that is not a finished result: an export of a failed or
    unfinished run's checkpoint, by the ``export.json`` recorded under ``scored["export"]``; "" for any other."""
    export = (scored or {}).get("export")
    if not export or export["finished_result"]:
        return ""
    return (f"NOT a finished result: an export of step {export['step']} ({export['checkpoint']}) of the run "
            f"{export['run']}, whose state then was '{export['run_state']}' ({Path(scored['model']) / EXPORT_RECORD})")


def report_markdown(results: dict[int, dict[str, dict[str, float]]], scored: Optional[dict[str, Any]]) -> str:
    """``istar-embed``'s ``embeddings.md``: :func:`markdown_table`, below :func:`unfinished_note` where there is one."""
    note = unfinished_note(scored)
    return (f"{note}\n\n" if note else "") + markdown_table(results)


GRID_COLUMNS = ("method", "lam", "zeta", "transform", "seeds", "spearman", "vs_base_raw", "isoscore", "average_cosine",
           "token_isoscore_star")
GRID_HEADERS = ("Method", "λ", "ζ", "transform", "seeds", "Spearman x100", "Δ vs Base raw, 95% interval", "IsoScore",
           "avg cos", "token IsoScore*")
GRID_CAPTION = ("Sentence embeddings of the evaluation split, raw and after post-hoc transforms fitted on training "
           "sentences: Spearman x100 of cosine similarity and IsoScore, mean ± std over seeds; Δ: the row's Spearman "
           "minus Base's raw one, paired by seed, with a seeds-only bootstrap interval (n.d.: not distinguishable at "
           "this sample size); token IsoScore*: the model's token cloud over all layers (what I-STAR acts on; no "
           "post-hoc transform applies).")


def grid_rows(records: Sequence[Record], read: ResultsReader = recorded_results) -> list[dict[str, Any]]:
    """One row per setting and transform, Base first, for the records that hold sentence-embedding measures
    (their ``results.json`` read by ``read``)."""
    settings: dict[tuple, dict[int, dict]] = {}
    tokens: dict[tuple, list[float]] = {}
    for record in records:
        if embeddings := sentence_embeddings(Path(record.path), read):
            settings.setdefault(setting_key(record), {})[record.seed] = embeddings
            tokens.setdefault(setting_key(record), []).append(record.isoscore_star)
    out = []
    for key in sorted(settings, key=lambda k: (k[0], k[1], k[2] != BASE, k[2], k[3] or 0, k[4] or 0, k[5])):
        model, task, method, lam, zeta, variant = key
        base = settings.get((model, task, BASE, None, None, variant), {})
        base_raw = {seed: runs["none"]["spearman"] for seed, runs in base.items() if "none" in runs}
        by_seed = settings[key]
        for transform in sorted({name for runs in by_seed.values() for name in runs}, key=lambda n: (n != "none", n)):
            values = {seed: runs[transform] for seed, runs in by_seed.items() if transform in runs}
            spearman = {seed: value["spearman"] for seed, value in values.items()}
            paired = paired_difference(task, "spearman x100", {s: None for s in spearman}, {s: None for s in base_raw},
                                       scores=(spearman, base_raw))
            out.append({"method": display_name(method), "lam": lam, "zeta": zeta, "transform": transform,
                        "seeds": len(values), "spearman": over_seeds(spearman.values()).text(".2f"),
                        "vs_base_raw": "—" if paired is None or (method == BASE and transform == "none")
                        else paired.text(),
                        "isoscore": over_seeds(value["isoscore"] for value in values.values()).text(".4f"),
                        "average_cosine": f"{statistics.fmean(v['average_cosine'] for v in values.values()):.3f}",
                        "token_isoscore_star": over_seeds(tokens[key]).text(".4f") if transform == "none" else "—"})
    return out


def grid_markdown(table: Sequence[dict[str, Any]]) -> str:
    """:func:`grid_rows` as a Markdown table."""
    return _markdown_table(GRID_HEADERS, ([row["method"], number_text(row["lam"]), number_text(row["zeta"]),
                                          *(row[name] for name in GRID_COLUMNS[3:])] for row in table))
