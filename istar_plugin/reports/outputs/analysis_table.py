"""``istar-analyze``'s analyses as one table (``summary.md``), a column per analysed model."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Optional, Sequence

from ..records.analyses import output_names
from ..tables import Table, markdown_table, write_table

CAPTION = ("What istar-analyze measured of each model, a column each (the numbers behind the I-STAR paper's Figures 4 "
           "to 6): its score with the split's examples and the step of the weights read; IsoScore* (zeta 0, padding "
           "excluded) of each layer's token cloud; TwoNN intrinsic dimension of each layer's example vectors (an "
           "encoder's [CLS], a decoder's last real token); the last layer's EV_1 and average cosine of its tokens and "
           "its mean |mean activation| over dimensions; the dimensions whose mean |activation| exceeds 10x the "
           "layer's median (outlier dimensions); I1/I2 of the input word embeddings.\n\n")
ORDER = {None: 0, "cross_entropy": 1, "cosreg": 2, "istar": 3}  # the pretrained model, Base, CosReg, I-STAR, others


def column_order(analyses: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The analyses in column order: by criterion (:data:`ORDER`), lambda, seed and step."""
    def key(analysis: dict[str, Any]) -> tuple:
        criterion = analysis.get("criterion") or {}
        name, lam = criterion.get("name"), criterion.get("lam")
        return (ORDER.get(name, len(ORDER)), str(name), lam if isinstance(lam, (int, float)) else 0.0,
                analysis.get("seed") or 0, analysis.get("step") or 0, str(analysis.get("label")))
    return sorted(analyses, key=key)


def distinct_labels(analyses: list[dict[str, Any]]) -> None:
    """Analyses sharing a label get distinct ones, in place: their seed added (seeds of one setting) and, where that
    still repeats (runs of one setting and seed), their run folders' names from as far up as tells them apart
    (:func:`output_names`). Distinct labels are kept as they are: a second call changes nothing."""
    additions = (lambda group: [f" seed {a.get('seed')}" for a in group],
                 lambda group: [f" ({name})" for name in output_names([Path(a.get("run_dir") or "pretrained")
                                                                       for a in group])])
    for addition in additions:
        groups: dict[str, list[dict[str, Any]]] = {}
        for analysis in analyses:
            groups.setdefault(analysis["label"], []).append(analysis)
        for group in (group for group in groups.values() if len(group) > 1):
            for analysis, added in zip(group, addition(group)):
                analysis["label"] += added


def _last_layer(analysis: dict[str, Any]) -> str:
    curves = analysis.get("explained_variance_per_layer") or []
    ev1 = "—" if not curves or not curves[-1] else f"{curves[-1][0]:.3f}"
    cosines = analysis.get("average_cosine_per_layer")
    cosine = "—" if not cosines or cosines[-1] is None else f"{cosines[-1]:.3f}"
    activation = analysis.get("mean_activation") or []
    mean_abs = f"{statistics.fmean(abs(v) for v in activation):.3f}" if activation else "—"
    return f"{ev1}, {cosine}, {mean_abs}"


def rows(analyses: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The table, header first: a row per measure, a column per analysis (in :func:`column_order`)."""
    ordered = [dict(analysis) for analysis in column_order(analyses)]
    distinct_labels(ordered)
    layers = max(len(a.get("isoscore_star_per_layer") or ()) for a in ordered)
    metrics = sorted({str(a.get("main_metric")) for a in ordered if a.get("main_metric")}) or ["score"]
    measures = [
        (f"{', '.join(metrics)} ({ordered[0].get('split')}, step)", lambda a: "{} ({}, {})".format(
            "—" if a.get("score") is None else f"{a['score']:.3f}", a.get("examples"), a.get("step"))),
        (f"IsoScore* per layer 1 → {layers}", lambda a: " ".join(  # two digits below 0.01: 0.00031 is not 0.000
            format(v, ".3f" if abs(v) >= 0.01 or v == 0 else ".2g") for v in a["isoscore_star_per_layer"])),
        (f"TwoNN of each example's vector per layer 1 → {layers}",
         lambda a: " ".join("—" if v is None else f"{v:.1f}" for v in a["twonn_per_layer"])),
        ("last layer: EV_1, average cosine, mean |mean activation|", _last_layer),
        (f"outlier dimensions per layer 1 → {layers}",
         lambda a: " ".join(str(len(found)) for found in a.get("outlier_dimensions_per_layer") or ())),
        ("word embeddings I1, I2", lambda a: "{I1:.4f}, {I2:.3g}".format(**a["word_embeddings"])
         if a.get("word_embeddings") else "—"),
    ]
    return [["", *(a["label"] for a in ordered)]] + [[name, *(shown(a) for a in ordered)] for name, shown in measures]


def markdown(analyses: Sequence[dict[str, Any]], table: Optional[Sequence[Sequence[str]]] = None) -> str:
    """:func:`rows` (or ``table``, already computed) as a Markdown table (``|`` in a cell escaped)."""
    table = rows(analyses) if table is None else table
    return markdown_table(table[0], table[1:], escape=True)


TABLE = Table("summary", rows=rows, markdown=markdown, csv_rows=None, caption=CAPTION)


def write_summary(analyses: Sequence[dict[str, Any]], out: Path) -> Path:
    """Write ``out/summary.md`` (:data:`TABLE`) and return its path."""
    out.mkdir(parents=True, exist_ok=True)
    write_table(TABLE, analyses, out)
    return out / f"{TABLE.name}.md"
