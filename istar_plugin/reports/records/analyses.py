"""What ``istar-analyze`` and ``istar-embed`` wrote, read back from their ``--out`` folder (or a copy kept in git)."""
from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any, Sequence

ANALYSIS = "analysis.json"  # what istar-analyze writes per analysed model


def analysis_files(folder: str | Path) -> list[Path]:
    """The ``analysis.json`` files of an ``istar-analyze`` output folder, in the order of their paths."""
    return sorted([*Path(folder).glob(f"*/{ANALYSIS}"), *Path(folder).glob(f"*/step_*/{ANALYSIS}")])


def output_names(run_dirs: Sequence[Path]) -> list[str]:
    """A distinct sub-directory name per run: its own name or, where names repeat, its folders' names joined with
    ``_`` from as far up as tells it apart (``parent_name``, ``grandparent_parent_name``, ...); a run named twice
    gets ``_2``, ``_3``, ... added."""
    parts = [Path(os.path.abspath(path)).parts[1:] or ("root",) for path in run_dirs]
    depths = [1] * len(parts)
    while True:
        names = ["_".join(folders[-depth:]) for folders, depth in zip(parts, depths)]
        repeated = [i for i, name in enumerate(names) if depths[i] < len(parts[i]) and any(
            other == name and parts[j] != parts[i] for j, other in enumerate(names))]
        if not repeated:
            break
        for i in repeated:
            depths[i] += 1
    taken, distinct = set(names), []
    for name in names:  # still repeated (one run named twice): numbered
        if name in distinct:
            name = next(f"{name}_{number}" for number in itertools.count(2) if f"{name}_{number}" not in taken)
            taken.add(name)
        distinct.append(name)
    return distinct


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


def read_embedding_record(folder: str | Path) -> dict[str, Any]:
    """``embeddings.json`` of an ``istar-embed --out`` folder; ValueError without one."""
    path = Path(folder) / EMBEDDINGS
    if not path.is_file():
        raise ValueError(f"{folder}: no {EMBEDDINGS}: not a folder istar-embed wrote")
    return json.loads(path.read_text(encoding="utf-8"))


def read_embedding_results(folder: str | Path) -> dict[int, dict[str, dict[str, Any]]]:
    """``results[layer][transform]`` of ``embeddings.json`` in ``embeddings.md``'s order; ValueError without one."""
    record = read_embedding_record(folder)
    return {int(layer): {name: by_transform[name] for name in record.get("transform_order", list(by_transform))}
            for layer, by_transform in sorted(record["per_layer"].items(), key=lambda item: int(item[0]))}
