"""Isotropy of what a classifier's head sees: IsoScore and EV_1..3 of the evaluation set's head inputs.

The head input is one vector per example (:attr:`~istar_plugin.models.EncoderOutput.head_input`: the pooled
or [CLS] representation, or the output of modules inserted before the head, e.g. the Isotropy Layer).
The Isotropy Layer paper reports exactly these: IsoScore and the explained variance of the top 1, 2, 3
principal components of the (centred) dev-set embeddings.

>>> import torch
>>> axes = torch.diag(torch.tensor([4., 1, 1, 1, 1, 1, 1, 1]))  # variances 16 : 1 : ... : 1
>>> summary = head_input_isotropy(torch.cat([axes, -axes]))
>>> [round(v, 2) for v in summary["cls_explained_variance"]], summary["cls_isoscore"] < 0.6  # 16/23, 17/23, 18/23
([0.7, 0.74, 0.78], True)
>>> head_input_isotropy(torch.ones(5, 8))  # a collapsed representation has no principal directions
{'cls_isoscore': None, 'cls_explained_variance': None}
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..isotropy import explained_variance_ratio, isoscore

EV_COMPONENTS = (1, 2, 3)


def head_input_isotropy(points: Tensor) -> dict[str, Any]:
    """``cls_isoscore`` and ``cls_explained_variance`` ([EV_1, EV_2, EV_3]) of ``points`` (n, d); None when
    the points have no variance (every example mapped to the same vector: a collapsed representation)."""
    points = torch.as_tensor(points).detach().to(torch.float64)
    if points.shape[0] < 2 or not bool((points - points[0]).abs().amax() > 0):
        return {"cls_isoscore": None, "cls_explained_variance": None}
    components = [k for k in EV_COMPONENTS if k <= points.shape[1]]
    return {
        "cls_isoscore": isoscore(points).item(),
        "cls_explained_variance": [explained_variance_ratio(points, k).item() for k in components],
    }
