"""What ``istar-embed`` wrote, read back: its ``--out`` folder's ``embeddings.json`` (written last, so a folder
holding one is complete), so that a copy of that folder kept in git (``docs/evidence/NAME``) is read exactly as
the folder itself.

>>> import json, tempfile
>>> from pathlib import Path
>>> out = Path(tempfile.mkdtemp())
>>> is_embedding_report(out)
False
>>> per_layer = {"10": {"center": {"spearman": 86.9}, "none": {"spearman": 86.7}}, "2": {"center": {}, "none": {}}}
>>> _ = (out / EMBEDDINGS).write_text(json.dumps({"per_layer": per_layer, "transform_order": ["none", "center"]}))
>>> is_embedding_report(out), read_embedding_results(out)
(True, {2: {'none': {}, 'center': {}}, 10: {'none': {'spearman': 86.7}, 'center': {'spearman': 86.9}}})
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["EMBEDDINGS", "is_embedding_report", "read_embedding_results"]

EMBEDDINGS = "embeddings.json"
"""The file ``istar-embed`` writes last into its ``--out`` folder."""


def is_embedding_report(folder: str | Path) -> bool:
    """Whether ``folder`` holds what ``istar-embed --out`` writes (an ``embeddings.json``)."""
    return (Path(folder) / EMBEDDINGS).is_file()


def read_embedding_results(folder: str | Path) -> dict[int, dict[str, dict[str, Any]]]:
    """``results[layer][transform]``, the measures of ``embeddings.json``'s ``per_layer``, in ``embeddings.md``'s
    order (the file's keys are sorted as text): layers as ints, ascending as ``istar-embed`` evaluates them,
    transforms in ``transform_order`` (a file written before it was recorded: in the file's order); a ValueError
    naming the folder if it holds no ``embeddings.json``."""
    path = Path(folder) / EMBEDDINGS
    if not path.is_file():
        raise ValueError(f"{folder}: no {EMBEDDINGS}: not a folder istar-embed wrote")
    record = json.loads(path.read_text(encoding="utf-8"))
    results = {}
    for layer, by_transform in sorted(record["per_layer"].items(), key=lambda item: int(item[0])):
        order = record.get("transform_order", list(by_transform))
        results[int(layer)] = {name: by_transform[name] for name in order}
    return results
