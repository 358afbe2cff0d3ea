"""Ding et al.'s isotropy-calibration Table 1 (GLUE) and Table 4 (I1/I2), ours beside theirs."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from ...storage.results import read_results
from ...storage.seeds import over_seeds
from ..paper import paper_rows
from ..records.run_extras import ResultsReader
from ..records.settings import method_rank
from ..tables import markdown_table

PAPER_METRIC = {"sst2": "accuracy", "mrpc": "f1", "cola": "matthews_correlation", "rte": "accuracy",
                "wnli": "accuracy", "stsb": "pearson", "qnli": "accuracy", "mnli": "accuracy",
                "mnli_mismatched": "accuracy", "qqp": "accuracy"}
"""Ding et al.'s metric for each GLUE task, in their column order."""

PAPER_SOURCE = 'Ding et al., "On Isotropy Calibration of Transformers", GLUE dev, mean of 3 runs'
PAPER_MODELS = ("bert", "roberta", "distilbert")  # our presets that are the paper's (its ranges shown for these)
PAPER_ISOTROPY = {  # methods.md: the paper states I1/I2 as ranges over models and tasks, not per cell
    "Base": ("0.91-0.95", "0.22-0.41"), "CosReg": ("0.91-0.95", "0.22-0.41"), "Flow": ("0.91-0.95", "0.22-0.41"),
    "Spec-Pol": ("0.99-1.00", "1e-4-0.06"), "Spec-Exp": ("0.99-1.00", "1e-4-0.06"),
}
METHOD_ORDER = ("Base", "CosReg", "Spec-Pol", "Spec-Exp", "Flow", "CosReg (hidden)", "I-STAR")
TABLE1_CAPTION = ("Isotropy calibration, Table 1 layout: ours mean ± std over seeds (paper's metric, x100); "
                  f"[the paper's mean] where model and task match ({PAPER_SOURCE}).\n\n")
TABLE4_CAPTION = ("Isotropy calibration, Table 4 content: I1/I2 of the word-embedding matrix after fine-tuning, "
                  "mean ± std over seeds; the paper gives only ranges over its models and tasks (methods.md).\n\n")


@dataclass(frozen=True)
class Run:
    """One finished run as this comparison sees it: its paper metric as a percentage (None if absent)."""

    model: str
    task: str
    method: str
    seed: int
    score: Optional[float]
    collapsed: bool
    embedding_i1: Optional[float]
    embedding_i2: Optional[float]
    isoscore_star: Optional[float]


def calibration_method(criterion: dict[str, Any]) -> str:
    """The paper's name for a criterion configuration."""
    name = criterion.get("name")
    if name == "cosreg":
        return "CosReg" if criterion.get("target") == "embeddings" else "CosReg (hidden)"
    if name == "spectrum":
        return "Spec-Pol" if criterion.get("decay", "polynomial") == "polynomial" else "Spec-Exp"
    return {"cross_entropy": "Base", "flow": "Flow", "istar": "I-STAR"}.get(name, str(name))


def read_runs(cells: Iterable[Path], read: Optional[ResultsReader] = None) -> list[Run]:
    """The runs of the given finished cell directories on a GLUE task; ResultsError for an unreadable one.
    ``read``: a cell's ``results.json`` (read again, to say what is wrong, where it gives none)."""
    runs = []
    for cell in cells:
        results = ((read and read(Path(cell))) or read_results(Path(cell))).require_finished()
        if results.task not in PAPER_METRIC:
            continue
        value = results.metric(PAPER_METRIC[results.task])
        score = 100.0 * value if isinstance(value, (int, float)) and math.isfinite(value) else None
        runs.append(Run(results.model, results.task, calibration_method(results.criterion), results.seed, score,
                        results.collapsed is True, results.embedding_i1, results.embedding_i2,
                        results.eval_isoscore_star))
    return runs


def _summary(values: Sequence[float], digits: int) -> str:
    return over_seeds(values).text(f".{digits}f") if values else "—"


def calibration_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row per model x method: per task its runs (for both tables) in the paper's column order."""
    grouped: dict[tuple[str, str], dict[str, list[Run]]] = {}
    for run in runs:
        grouped.setdefault((run.model, run.method), {}).setdefault(run.task, []).append(run)
    return [{"model": model, "method": method, "tasks": grouped[model, method]}
            for model, method in sorted(grouped, key=lambda key: (key[0], method_rank(key[1], METHOD_ORDER)))]


def score_cell(runs: Sequence[Run], paper: Optional[float]) -> str:
    """``mean ± std``, ``(k/n collapsed)`` when any run collapsed, and ``[paper]`` where the paper has the cell."""
    text = "—"
    if runs:
        scores = [run.score for run in runs if run.score is not None]
        text = _summary(scores, 2) if scores else "NaN"
        if len(scores) < len(runs):
            text += f" ({len(runs) - len(scores)} NaN)"
        if collapsed := sum(run.collapsed for run in runs):
            text += f" ({collapsed}/{len(runs)} collapsed)"
    if paper is not None:
        text += f" [{'NaN' if math.isnan(paper) else f'{paper:.2f}'}]"
    return text


def table1_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Ding et al.'s Table 1 layout: rows model x method, columns the GLUE tasks; ours, [the paper's]."""
    papers = {(row["model"], row["method"]): {task: float(row[task]) for task in PAPER_METRIC}
              for row in paper_rows("ding_calibration_glue.csv")}  # the paper's mean, NaN where its run collapsed
    return markdown_table(("Model", "Method", *PAPER_METRIC), ([row["model"], row["method"], *(
        score_cell(row["tasks"].get(task, []), papers.get((row["model"], row["method"]), {}).get(task)
                   if task in row["tasks"] else None) for task in PAPER_METRIC)] for row in rows))


def table4_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Ding et al.'s Table 4 content: I1/I2 of the word-embedding matrix after fine-tuning (and eval IsoScore*)."""
    lines = []
    for row in rows:
        paper_i1, paper_i2 = (PAPER_ISOTROPY.get(row["method"]) if row["model"] in PAPER_MODELS else None) or ("—", "—")
        for task in PAPER_METRIC:
            runs = row["tasks"].get(task)
            if not runs:
                continue
            values = {name: [getattr(run, name) for run in runs if getattr(run, name) is not None]
                      for name in ("embedding_i1", "embedding_i2", "isoscore_star")}
            lines.append([row["model"], row["method"], task, _summary(values["embedding_i1"], 4),
                          _summary(values["embedding_i2"], 4), _summary(values["isoscore_star"], 3),
                          f"{sum(run.collapsed for run in runs)}/{len(runs)}", paper_i1, paper_i2])
    header = ("Model", "Method", "Task", "I1", "I2", "eval IsoScore*", "collapsed", "paper I1", "paper I2")
    return markdown_table(header, lines)
