"""``istar-embed``'s table (``embeddings.md``): one row per (layer, transform), STS-B Spearman x100 and the
isotropy of the sentence embeddings; the docs render it afresh from a kept copy of an ``--out`` folder
(:mod:`..records.embeddings`).

>>> measures = {"spearman": None, "spearman_undefined": "one pair", "isoscore": 0.25, "isoscore_star": 0.26,
...             "average_cosine": 0.02, "i1": 0.3, "ev_1": 0.04, "rankme": 299.9, "alignment": 0.27,
...             "uniformity": -3.84}
>>> print(markdown_table({6: {"none": measures}}), end="")  # doctest: +NORMALIZE_WHITESPACE
| layer | transform | Spearman x100 | IsoScore | IsoScore* | avg cos | I1 | EV_1 | RankMe | align | uniform |
|---|---|---|---|---|---|---|---|---|---|---|
| 6 | none | undefined (one pair) | 0.2500 | 0.2600 | 0.020 | 0.300 | 0.040 | 299.9 | 0.270 | -3.840 |
"""
from __future__ import annotations

from ...isotropy.embeddings import undefined_text

__all__ = ["TABLE_FILE", "TABLE_COLUMNS", "markdown_table"]

TABLE_FILE = "embeddings.md"
"""The file of ``istar-embed``'s ``--out`` folder that holds :func:`markdown_table`."""
TABLE_COLUMNS = (("spearman", ".2f"), ("isoscore", ".4f"), ("isoscore_star", ".4f"), ("average_cosine", ".3f"),
                 ("i1", ".3f"), ("ev_1", ".3f"), ("rankme", ".1f"), ("alignment", ".3f"), ("uniformity", ".3f"))
"""The markdown table's measures after its layer and transform columns, and their formats."""


def markdown_table(results: dict[int, dict[str, dict[str, float]]]) -> str:
    """One row per (layer, transform) of ``results[layer][transform]`` (the measures), in their order: Spearman x100
    and the isotropy measures (``undefined (why)`` where the data leave one undefined)."""
    lines = ["| layer | transform | Spearman x100 | IsoScore | IsoScore* | avg cos | I1 | EV_1 | RankMe | align "
             "| uniform |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for layer, by_transform in results.items():
        for name, m in by_transform.items():
            cells = [undefined_text(m, measure, spec) for measure, spec in TABLE_COLUMNS]
            lines.append(f"| {layer} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
