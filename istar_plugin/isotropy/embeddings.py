"""The measures of a set of sentence embeddings: ``istar-embed``'s report and the sentence-transformers
:class:`~istar_plugin.integrations.st.IsotropyEvaluator` both compute them here.

- ``spearman``: Spearman rank correlation x 100 of the pairs' cosine similarity with the gold score;
- ``isoscore``: IsoScore (IsoScore* at zeta 0); ``isoscore_star``: IsoScore* at ``zeta`` shrunk toward
  ``fit_cov`` (e.g. the covariance of a fit set's embeddings, the paper's Sigma_S);
- ``i1``, ``i2`` (partition-function isotropy), ``average_cosine``, ``ev_1`` and ``ev_10`` (explained variance of
  the top 1 and 10 principal components), ``rankme`` (effective rank);
- ``alignment`` over the positive pairs (gold score >= :data:`POSITIVE_SCORE`, as in Gao et al. 2021's analysis of
  STS-B; NaN without one) and ``uniformity`` over all the sentences (Wang & Isola 2020, t = 2).

>>> import torch
>>> first = torch.tensor([[1., 0.], [0., 1.], [1., -1.]])
>>> second = torch.tensor([[1., 0.], [1., 1.], [-1., 1.]])  # cosines 1, 0.71, -1
>>> embedding_measures(torch.cat([first, second]), scores=[5.0, 3.0, 0.0], names=("spearman", "alignment"))
{'spearman': 100.0, 'alignment': 0.0}
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor

from ..metrics import spearman
from .covariance import isoscore, isoscore_star
from .measures import (
    alignment,
    average_cosine_similarity,
    explained_variance_curve,
    partition_isotropy,
    rankme,
    uniformity,
)

__all__ = ["MEASURES", "PAIR_MEASURES", "POSITIVE_SCORE", "embedding_measures"]

MEASURES = ("spearman", "isoscore", "isoscore_star", "i1", "i2", "average_cosine", "ev_1", "ev_10", "rankme",
            "alignment", "uniformity")
PAIR_MEASURES = ("spearman", "alignment")
"""The measures that need pairs with gold scores."""
POSITIVE_SCORE = 4.0


def embedding_measures(points: Tensor, scores: Optional[Sequence[float]] = None, *, fit_cov: Optional[Tensor] = None,
                       zeta: float = 0.2, names: Sequence[str] = MEASURES) -> dict[str, float]:
    """``names`` of the measures (module docstring) of the embeddings ``points`` (m, d), computed in float64, in the
    order of ``names``.

    With ``scores`` (n gold similarities), the first n rows are the pairs' first sentences and the next n their
    second ones. ``isoscore_star`` shrinks toward ``fit_cov`` (d, d) with weight ``zeta``.
    """
    unknown = [name for name in names if name not in MEASURES]
    if unknown:
        raise ValueError(f"unknown embedding measures {unknown}; choices: {', '.join(MEASURES)}")
    paired = [name for name in names if name in PAIR_MEASURES]
    if paired and scores is None:
        raise ValueError(f"{', '.join(paired)} need gold scores for the pairs")
    points = points.double()
    values: dict[str, float] = {}
    if scores is not None:
        n = len(scores)
        first, second = points[:n], points[n : 2 * n]
        if "spearman" in names:
            cosine = torch.nn.functional.cosine_similarity(first, second, dim=1)
            values["spearman"] = 100 * spearman(cosine.tolist(), list(scores))
    if "isoscore" in names:
        values["isoscore"] = isoscore(points).item()
    if "isoscore_star" in names:
        values["isoscore_star"] = isoscore_star(points, None if fit_cov is None else fit_cov.double(), zeta).item()
    if "i1" in names or "i2" in names:
        i1, i2 = partition_isotropy(points)
        values.update({name: value.item() for name, value in (("i1", i1), ("i2", i2)) if name in names})
    if "average_cosine" in names:
        values["average_cosine"] = average_cosine_similarity(points).item()
    if "ev_1" in names or "ev_10" in names:
        curve = explained_variance_curve(torch.cov(points.T), min(10, points.shape[1]))
        values.update({name: value.item() for name, value in (("ev_1", curve[0]), ("ev_10", curve[-1]))
                       if name in names})
    if "rankme" in names:
        values["rankme"] = rankme(points).item()
    if "alignment" in names:
        positive = torch.tensor([score >= POSITIVE_SCORE for score in scores])
        values["alignment"] = alignment(first[positive], second[positive]).item() if positive.any() else math.nan
    if "uniformity" in names:
        values["uniformity"] = uniformity(points).item()
    return {name: values[name] for name in names}
