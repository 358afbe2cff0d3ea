"""Ding et al., "On Isotropy Calibration of Transformers", as data: their GLUE results (``ding_calibration_glue.csv``
beside this module, transcribed from the paper), the metric they report per task, and the I1/I2 ranges they state.

>>> paper_table()["bert", "Spec-Pol"]["mrpc"], PAPER_METRIC["mrpc"], PAPER_ISOTROPY["Spec-Pol"]
(81.22, 'f1', ('0.99-1.00', '1e-4-0.06'))
"""
from __future__ import annotations

import csv
from importlib import resources

__all__ = ["PAPER_METRIC", "PAPER_SOURCE", "PAPER_MODELS", "PAPER_ISOTROPY", "paper_table"]

PAPER_METRIC = {"sst2": "accuracy", "mrpc": "f1", "cola": "matthews_correlation", "rte": "accuracy",
                "wnli": "accuracy", "stsb": "pearson", "qnli": "accuracy", "mnli": "accuracy",
                "mnli_mismatched": "accuracy", "qqp": "accuracy"}
"""Ding et al.'s metric for each GLUE task, in their column order."""

PAPER_SOURCE = 'Ding et al., "On Isotropy Calibration of Transformers", GLUE dev, mean of 3 runs'
PAPER_MODELS = ("bert", "roberta", "distilbert")
"""Our model presets that are the paper's models (its ranges are shown for these alone)."""
PAPER_ISOTROPY = {  # methods.md: the paper states I1/I2 as ranges over models and tasks, not per cell
    "Base": ("0.91-0.95", "0.22-0.41"), "CosReg": ("0.91-0.95", "0.22-0.41"), "Flow": ("0.91-0.95", "0.22-0.41"),
    "Spec-Pol": ("0.99-1.00", "1e-4-0.06"), "Spec-Exp": ("0.99-1.00", "1e-4-0.06"),
}


def paper_table() -> dict[tuple[str, str], dict[str, float]]:
    """(model preset, method) -> task -> the paper's mean (NaN where its run collapsed)."""
    paper = resources.files("istar_plugin.reports.paper")
    text = paper.joinpath("ding_calibration_glue.csv").read_text(encoding="utf-8")
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return {(row["model"], row["method"]): {task: float(row[task]) for task in PAPER_METRIC} for row in rows}
