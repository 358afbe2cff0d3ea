"""The I-STAR paper's Table 1 as data (``istar_table1.csv``: mean and std over 5 seeds, percent) and its metrics."""
from __future__ import annotations

import functools
from typing import Optional

from . import paper_rows

PAPER_METRICS = {
    "sst2": ("accuracy",), "qnli": ("accuracy",), "rte": ("accuracy",), "mrpc": ("accuracy",), "qqp": ("accuracy",),
    "sst5": ("accuracy",), "cola": ("matthews_correlation",), "stsb": ("pearson",), "squad": ("f1", "exact_match"),
}
"""Task -> the metrics the paper's Table 1 reports, the first one being the one settings are selected on."""

PAPER_MODELS = {"albert": "ALBERT", "bert": "BERT", "distilbert": "DistilBERT"}  # our model preset -> the paper's
PAPER_METHODS = {"cross_entropy": "base", "cosreg": "cosreg", "istar": "istar"}  # criterion -> the paper's method


def reported_metrics(task: str, main_metric: str) -> tuple[str, ...]:
    """The metrics a Table 1 row shows for ``task``: the paper's, or the task's main metric for other tasks."""
    return PAPER_METRICS.get(task, (main_metric,))


@functools.lru_cache(maxsize=1)
def paper_table1() -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """``(model, method, task, metric) -> (mean, std)`` in the paper's names (``BERT``, ``istar``, ``sst2``, ``f1``)."""
    return {(row["model"], row["method"], row["task"], row["metric"]): (float(row["mean"]), float(row["std"]))
            for row in paper_rows("istar_table1.csv")}


def paper_result(model: str, criterion: str, task: str, metric: str) -> Optional[tuple[float, float]]:
    """The paper's ``(mean, std)`` for our model preset, criterion, task and metric; None where it has none."""
    key = (PAPER_MODELS.get(model), PAPER_METHODS.get(criterion), task, metric)
    return paper_table1().get(key)  # type: ignore[arg-type]
