"""What ``istar-analyze`` and ``istar-embed`` wrote, read back from their ``--out`` folder (or a copy kept in git)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ANALYSIS = "analysis.json"  # what istar-analyze writes per analysed model


def analysis_files(folder: str | Path) -> list[Path]:
    """The ``analysis.json`` files of an ``istar-analyze`` output folder, in the order of their paths."""
    return sorted([*Path(folder).glob(f"*/{ANALYSIS}"), *Path(folder).glob(f"*/step_*/{ANALYSIS}")])


def is_analysis(folder: str | Path) -> bool:
    """Whether ``folder`` holds what ``istar-analyze --out`` writes (a sub-folder with an ``analysis.json``)."""
    return bool(analysis_files(folder))


def read_analyses(folder: str | Path) -> list[dict[str, Any]]:
    """Every analysis of the folder, in the order of their paths; a ValueError naming the folder if it holds none."""
    paths = analysis_files(folder)
    if not paths:
        raise ValueError(f"{folder}: no RUN/{ANALYSIS}: not a folder istar-analyze wrote")
    return [json.loads(path.read_text(encoding="utf-8")) for path in paths]


EMBEDDINGS = "embeddings.json"  # what istar-embed writes last into its --out folder


def is_embedding_report(folder: str | Path) -> bool:
    """Whether ``folder`` holds what ``istar-embed --out`` writes (an ``embeddings.json``)."""
    return (Path(folder) / EMBEDDINGS).is_file()


def read_embedding_results(folder: str | Path) -> dict[int, dict[str, dict[str, Any]]]:
    """``results[layer][transform]`` of ``embeddings.json`` in ``embeddings.md``'s order; ValueError without one."""
    path = Path(folder) / EMBEDDINGS
    if not path.is_file():
        raise ValueError(f"{folder}: no {EMBEDDINGS}: not a folder istar-embed wrote")
    record = json.loads(path.read_text(encoding="utf-8"))
    return {int(layer): {name: by_transform[name] for name in record.get("transform_order", list(by_transform))}
            for layer, by_transform in sorted(record["per_layer"].items(), key=lambda item: int(item[0]))}
