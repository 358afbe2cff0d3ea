"""What ``istar-analyze`` wrote, read back: every ``analysis.json`` of its ``--out`` folder (a run's ``RUN/``, a kept
checkpoint's ``RUN/step_N/``, the pretrained model's), so that a copy of that folder kept in git
(``docs/evidence/NAME``) is read exactly as the folder itself.

>>> import json, tempfile
>>> from pathlib import Path
>>> out = Path(tempfile.mkdtemp())
>>> for name, seed in (("b", 2), ("a", 1)):
...     (out / name).mkdir()
...     _ = (out / name / ANALYSIS).write_text(json.dumps({"label": "Base", "seed": seed}))
>>> is_analysis(out), [analysis["seed"] for analysis in read_analyses(out)]
(True, [1, 2])
>>> is_analysis(out / "a")
False
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["ANALYSIS", "is_analysis", "analysis_files", "read_analyses"]

ANALYSIS = "analysis.json"
"""The file ``istar-analyze`` writes per analysed model."""


def analysis_files(folder: str | Path) -> list[Path]:
    """The ``analysis.json`` files of an ``istar-analyze`` output folder, in the order of their paths."""
    folder = Path(folder)
    return sorted([*folder.glob(f"*/{ANALYSIS}"), *folder.glob(f"*/step_*/{ANALYSIS}")])


def is_analysis(folder: str | Path) -> bool:
    """Whether ``folder`` holds what ``istar-analyze --out`` writes (a sub-folder with an ``analysis.json``)."""
    return bool(analysis_files(folder))


def read_analyses(folder: str | Path) -> list[dict[str, Any]]:
    """Every analysis of the folder, in the order of their paths; a ValueError naming the folder if it holds none."""
    paths = analysis_files(folder)
    if not paths:
        raise ValueError(f"{folder}: no RUN/{ANALYSIS}: not a folder istar-analyze wrote")
    return [json.loads(path.read_text(encoding="utf-8")) for path in paths]
