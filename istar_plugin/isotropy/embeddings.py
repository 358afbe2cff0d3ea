"""The measures of a set of sentence embeddings (:data:`MEASURES`): ``spearman`` x 100 of the pairs' cosines against
gold scores, ``alignment`` over positive pairs (gold >= :data:`POSITIVE_SCORE`), the others over every sentence. A
measure the data leave undefined is None, with the reason beside it as ``NAME_undefined``.

>>> first = torch.tensor([[1., 0.], [0., 1.], [1., -1.]])
>>> second = torch.tensor([[1., 0.], [1., 1.], [-1., 1.]])  # cosines 1, 0.71, -1
>>> embedding_measures(torch.cat([first, second]), scores=[5.0, 3.0, 0.0], names=("spearman", "alignment"))
{'spearman': 100.0, 'alignment': 0.0}
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

from ..metrics import UNDEFINED_SUFFIX, spearman
from .covariance import isoscore, isoscore_star
from .measures import (alignment, average_cosine_similarity, explained_variance_curve, partition_isotropy, rankme,
                       uniformity)

MEASURES = ("spearman", "isoscore", "isoscore_star", "i1", "i2", "average_cosine", "ev_1", "ev_10", "rankme",
            "alignment", "uniformity")
POSITIVE_SCORE = 4.0


def embedding_measures(points: Tensor, scores: Optional[Sequence[float]] = None, *, fit_cov: Optional[Tensor] = None,
                       zeta: float = 0.2, names: Sequence[str] = MEASURES) -> dict[str, Any]:
    """The measures ``names`` of the embeddings ``points`` (m, d) in float64, in order; an undefined one is None.
    With ``scores`` (n gold similarities), rows 0..n-1 and n..2n-1 are the pairs' first and second sentences."""
    if unknown := [name for name in names if name not in MEASURES]:
        raise ValueError(f"unknown embedding measures {unknown}; choices: {', '.join(MEASURES)}")
    paired = [name for name in names if name in ("spearman", "alignment")]
    if paired and scores is None:
        raise ValueError(f"{', '.join(paired)} need gold scores for the pairs")
    points = points.double()
    n = len(scores) if scores is not None else 0
    first, second = points[:n], points[n : 2 * n]
    positive = torch.as_tensor(scores if scores is not None else [], dtype=torch.float64) >= POSITIVE_SCORE
    shrinkage = None if fit_cov is None or zeta == 0 else zeta * fit_cov.double()
    partition = functools.cache(lambda: partition_isotropy(points))
    curve = functools.cache(lambda: explained_variance_curve(torch.cov(points.T), min(10, points.shape[1])))
    compute: dict[str, Callable[[], Any]] = {
        "spearman": lambda: 100 * spearman(_pair_cosines(first, second).tolist(), list(scores)),
        "isoscore": lambda: isoscore(points).item(),
        "isoscore_star": lambda: isoscore_star(points, None if fit_cov is None else fit_cov.double(), zeta).item(),
        "i1": lambda: partition()[0].item(),
        "i2": lambda: partition()[1].item(),
        "average_cosine": lambda: average_cosine_similarity(points).item(),
        "ev_1": lambda: curve()[0].item(),
        "ev_10": lambda: curve()[-1].item(),
        "rankme": lambda: rankme(points).item(),
        "alignment": lambda: alignment(first[positive], second[positive]).item(),
        "uniformity": lambda: uniformity(points).item(),
    }
    values: dict[str, Any] = {}
    for name in names:
        reason = _why_undefined(name, points, scores, first, second, shrinkage)
        values[name] = None if reason else compute[name]()
        if reason:
            values[name + UNDEFINED_SUFFIX] = reason
    return values


def _pair_cosines(first: Tensor, second: Tensor) -> Tensor:
    return torch.nn.functional.cosine_similarity(first, second, dim=1)


def _why_undefined(name: str, points: Tensor, scores: Optional[Sequence[float]], first: Tensor, second: Tensor,
                   shrinkage: Optional[Tensor]) -> Optional[str]:
    """Why measure ``name`` has no value on these data (a zero spread it would divide by), or None."""
    if not torch.isfinite(points).all():
        return "the embeddings are not all finite (NaN or infinity)"
    if name == "spearman":
        if len(scores) < 2:
            return f"a correlation needs at least 2 pairs, got {len(scores)}"
        if not all(math.isfinite(score) for score in scores):
            return "the gold scores are not all finite"
        if len(set(scores)) == 1:
            return "the gold scores are constant"
        if len(set(_pair_cosines(first, second).tolist())) == 1:
            return "the cosine similarities are constant"
    if name == "alignment" and not any(score >= POSITIVE_SCORE for score in scores):
        return f"no pair has a gold score >= {POSITIVE_SCORE:g}"
    if name in ("isoscore", "isoscore_star", "ev_1", "ev_10", "i1", "i2", "average_cosine", "uniformity") \
            and points.shape[0] < 2:
        return f"needs at least 2 embeddings, got {points.shape[0]}"
    spread = (points - points.mean(dim=0)).abs().max().item() if points.shape[0] else 0.0
    if name in ("isoscore", "ev_1", "ev_10") and spread == 0:
        return "the embeddings are all equal (zero variance)"
    if name == "isoscore_star" and spread == 0 and (shrinkage is None or not shrinkage.abs().max().item() > 0):
        return "the embeddings are all equal (zero variance) and nothing is shrunk toward"
    if name == "rankme" and not points.abs().max().item() > 0:
        return "the embeddings are all zero"
    return None
