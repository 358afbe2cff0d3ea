"""A setting against the I-STAR paper's Table 1 (:mod:`istar_plugin.reports.paper.istar`): the paper's mean and std
and our difference, where the paper ran the same model (or the stand-in ``paper_model``), method, task and metric.

>>> from istar_plugin.reports.records.settings import Setting
>>> mean, std, difference, model = paper_comparison(
...     Setting("bert", "sst2", "istar", -5.0, 0.2, "accuracy", (1, 2), (92.5, 93.5), (0.1, 0.1)), "accuracy")
>>> mean, std, round(difference, 2), model
(92.65, 0.18, 0.35, 'bert')
>>> minilm = Setting("minilm", "sst2", "istar", -1.0, 0.2, "accuracy", (1,), (92.5,), (0.1,))
>>> paper_comparison(minilm, "accuracy") is None
True
"""
from __future__ import annotations

from typing import Optional

from ..paper.istar import paper_result
from ..records.settings import Setting, metric_summary

__all__ = ["paper_comparison"]


def paper_comparison(setting: Optional[Setting], metric: str, paper_model: Optional[str] = None
                     ) -> Optional[tuple[float, float, float, str]]:
    """``(paper mean, paper std, ours - paper, paper model)`` where the paper's Table 1 has this model, method, task
    and metric; for a model the paper did not run (MiniLM), the paper's ``paper_model`` (``bert``) if given."""
    ours = metric_summary(setting, metric)
    if ours is None or setting is None:
        return None
    for model in (setting.model, paper_model):
        paper = None if model is None else paper_result(model, setting.method, setting.task, metric)
        if paper is not None:
            return paper[0], paper[1], ours[0] - paper[0], model
    return None
