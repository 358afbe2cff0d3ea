"""Isotropy of point clouds (rows are points): IsoScore, differentiable IsoScore*, and the seed papers' measures.

>>> import torch
>>> points = torch.randn(2000, 8, dtype=torch.float64) * torch.tensor([1., 1, 1, 1, 1, 1, 1, 1e-9]).double()
>>> round(isoscore(points).item(), 1)  # 7 of 8 dimensions used equally: (7 - 1) / (8 - 1)
0.9
"""
from .covariance import (CovarianceAccumulator, isoscore, isoscore_from_cov, isoscore_star, pooled_isoscore_star,
                         score_text)
from .measures import (alignment, average_cosine_similarity, cosine_from_unit_sums, explained_variance_curve,
                       explained_variance_ratio, partition_isotropy, rankme, twonn_dimension, uniformity)

__all__ = ["isoscore", "isoscore_star", "isoscore_from_cov", "pooled_isoscore_star", "score_text",
           "CovarianceAccumulator", "average_cosine_similarity", "partition_isotropy", "explained_variance_ratio",
           "explained_variance_curve", "cosine_from_unit_sums", "twonn_dimension", "alignment", "uniformity", "rankme"]
