"""Training-time isotropy against post-hoc transforms: for every setting of a grid whose runs recorded their sentence
embeddings (engine ``sentence_transformers``: ``results.json``'s ``sentence_embeddings``), the evaluation split's
Spearman x 100 and IsoScore raw and after each transform, mean ± std over seeds, and each one's difference to Base
*raw* paired by seed (a seeds-only bootstrap interval and verdict, :mod:`istar_plugin.reports.comparisons.paired`).
Base's whitened row against an I-STAR raw row answers whether raising or lowering isotropy in training beats whitening
afterwards.

>>> row = {"method": "I-STAR", "lam": -1.0, "zeta": 0.2, "transform": "none", "seeds": 3, "spearman": "86.10 ± 0.20",
...        "vs_base_raw": "-0.30 [-0.50, -0.10] worse", "isoscore": "0.2100 ± 0.0100", "average_cosine": "0.020",
...        "token_isoscore_star": "0.1600 ± 0.0010"}
>>> markdown([row]).splitlines()[2].split(" | ")
['| I-STAR', '-1', '0.2', 'none', '3', '86.10 ± 0.20', '-0.30 [-0.50, -0.10] worse', '0.2100 ± 0.0100', '0.020', \
'0.1600 ± 0.0010 |']
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Sequence

from ..comparisons.paired import paired_difference
from ..comparisons.versus_base import BASE
from ..records.cells import Record
from ..records.run_extras import sentence_embeddings
from ..records.settings import display_name

__all__ = ["rows", "markdown", "COLUMNS", "CAPTION"]

COLUMNS = ("method", "lam", "zeta", "transform", "seeds", "spearman", "vs_base_raw", "isoscore", "average_cosine",
           "token_isoscore_star")
HEADERS = ("Method", "λ", "ζ", "transform", "seeds", "Spearman x100", "Δ vs Base raw, 95% interval", "IsoScore",
           "avg cos", "token IsoScore*")
CAPTION = ("Sentence embeddings of the evaluation split, raw and after post-hoc transforms fitted on training "
           "sentences: Spearman x100 of cosine similarity and IsoScore, mean ± std over seeds; Δ: the row's Spearman "
           "minus Base's raw one, paired by seed, with a seeds-only bootstrap interval (n.d.: not distinguishable at "
           "this sample size); token IsoScore*: the model's token cloud over all layers (what I-STAR acts on; no "
           "post-hoc transform applies).")


def _mean_std(values: Sequence[float], digits: int) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.{digits}f} ± {spread:.{digits}f}"


def rows(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per setting and transform, Base first, for the records that hold sentence-embedding measures."""
    measured = [(record, sentence_embeddings(Path(record.path))) for record in records]
    measured = [(record, embeddings) for record, embeddings in measured if embeddings]
    settings: dict[tuple, dict[int, dict]] = {}
    tokens: dict[tuple, list[float]] = {}
    for record, embeddings in measured:
        key = (record.model, record.task, record.method, record.lam, record.zeta, record.variant)
        settings.setdefault(key, {})[record.seed] = embeddings
        tokens.setdefault(key, []).append(record.isoscore_star)
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
                        "seeds": len(values),
                        "spearman": _mean_std(list(spearman.values()), 2),
                        "vs_base_raw": "—" if paired is None or (method == BASE and transform == "none")
                        else paired.text(),
                        "isoscore": _mean_std([value["isoscore"] for value in values.values()], 4),
                        "average_cosine":
                            f"{statistics.fmean(value['average_cosine'] for value in values.values()):.3f}",
                        "token_isoscore_star": _mean_std(tokens[key], 4) if transform == "none" else "—"})
    return out


def _number(value: Any) -> str:
    return "—" if value is None else f"{value:g}"


def markdown(table: Sequence[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for row in table:
        cells = [row["method"], _number(row["lam"]), _number(row["zeta"]), row["transform"], str(row["seeds"]),
                 row["spearman"], row["vs_base_raw"], row["isoscore"], row["average_cosine"],
                 row["token_isoscore_star"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
