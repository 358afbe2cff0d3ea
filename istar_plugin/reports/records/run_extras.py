"""What a finished run's ``results.json`` holds beyond its :class:`~.cells.Record`: the eval IsoScore* of each layer
and the sentence-embedding measures (engine ``sentence_transformers``).

>>> import json, tempfile
>>> cell = Path(tempfile.mkdtemp())
>>> _ = (cell / "results.json").write_text(json.dumps({"eval_isoscore_star_per_layer": [0.3, 0.01, 0.05]}))
>>> layer_isoscores(cell, [0, 2, 3]), sentence_embeddings(cell)
([0.01, 0.05], None)
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

from ...storage.results import RESULTS, ResultsError, read_results

__all__ = ["layer_isoscores", "sentence_embeddings"]


def layer_isoscores(cell: Path, layers: Sequence[int]) -> Optional[list[float]]:
    """The run's eval IsoScore* of each of ``layers`` (hidden-state indices; 0, the embeddings, has none); None
    without a readable per-layer record."""
    try:
        per_layer = json.loads((Path(cell) / RESULTS).read_text(encoding="utf-8")).get("eval_isoscore_star_per_layer")
    except (OSError, ValueError):
        return None
    if not per_layer:
        return None
    return [float(per_layer[index - 1 if index > 0 else index]) for index in layers if index != 0]


def sentence_embeddings(cell: Path) -> Optional[dict[str, dict[str, Any]]]:
    """Transform -> the evaluation split's sentence-embedding measures (``spearman``, ``isoscore``,
    ``average_cosine``), as the run recorded them; None without."""
    try:
        return read_results(Path(cell) / RESULTS).extra.get("sentence_embeddings")
    except ResultsError:
        return None
