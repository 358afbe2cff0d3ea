"""CosReg (Gao et al. 2019): the task loss plus ``lam`` times a mean pairwise cosine similarity.

Two targets, both called CosReg in the literature: ``hidden`` (the I-STAR paper's: the batch's last-layer
token states, mean over pairs i != j) and ``embeddings`` (Gao et al. / Ding et al.: the rows of the word-
embedding matrix, ``(1/|V|^2) sum_{i != j} w^_i . w^_j``, in O(|V| d), never |V| x |V|).

>>> import torch
>>> tokens = torch.ones(4, 3)  # identical directions: mean cosine 1
>>> total, cosine = cosreg_loss(torch.tensor(0.5), tokens, lam=2.0)
>>> round(total.item(), 4), round(cosine.item(), 4)
(2.5, 1.0)
>>> round(embedding_cosine(torch.ones(4, 3)).item(), 4)  # 12 ordered pairs / 4^2
0.75
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..isotropy import average_cosine_similarity
from ..registry import CRITERIONS
from .configs import CosRegConfig, CosRegSetup
from .task import CriterionOutput, CrossEntropyCriterion, task_loss

def cosreg_loss(loss: Tensor, last_layer_tokens: Tensor, lam: float) -> tuple[Tensor, Tensor]:
    """CosReg (Gao et al. 2019): ``loss + lam * mean cosine over pairs i != j``; returns (total, mean cosine)."""
    with torch.autocast(device_type=last_layer_tokens.device.type, enabled=False):
        cosine = average_cosine_similarity(last_layer_tokens.float())
    return loss + lam * cosine, cosine


def embedding_cosine(matrix: Tensor) -> Tensor:
    """``(1/|V|^2) sum_{i != j} cos(w_i, w_j)`` over the rows of ``matrix`` (Gao et al.'s normalisation).

    O(|V| d) and memory-lean: the unit rows are never materialised (``sum_i w^_i = W^T (1/||w_i||)``), and the
    gradient is written in one pass. Zero rows count as cosine 0 with every other row.
    """
    with torch.autocast(device_type=matrix.device.type, enabled=False):
        return _EmbeddingCosine.apply(matrix.float())


class _EmbeddingCosine(torch.autograd.Function):
    """value = (||s||^2 - #nonzero rows) / n^2 with s = sum_i w_i / ||w_i||;
    d value / d w_i = (2 / n^2) (s - (w^_i . s) w^_i) / ||w_i||."""

    @staticmethod
    def forward(ctx, matrix: Tensor) -> Tensor:
        norms = torch.linalg.vector_norm(matrix, dim=1)
        inverse = torch.where(norms > 0, 1.0 / norms.clamp_min(torch.finfo(matrix.dtype).tiny), torch.zeros_like(norms))
        total = matrix.T @ inverse  # sum of the unit rows, without forming them
        rows = matrix.shape[0]
        ctx.save_for_backward(matrix, inverse, total)
        return (total.dot(total) - (norms > 0).sum()) / rows**2

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> Tensor:
        matrix, inverse, total = ctx.saved_tensors
        scale = 2.0 * grad_output / matrix.shape[0] ** 2
        projections = matrix @ total  # w_i . s
        grad = matrix * (-scale * projections * inverse.pow(3)).unsqueeze(1)
        return grad.addr_(inverse, total, alpha=float(scale))


@CRITERIONS.register("cosreg", CosRegConfig)
class CosRegCriterion(CosRegSetup, CrossEntropyCriterion):
    """Task loss plus ``lam`` times the mean pairwise cosine of last-layer token states (padding excluded)
    or, with ``target=embeddings``, of the rows of the word-embedding matrix."""

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        base = task_loss(self.kind, output, batch)
        if self.cfg.target == "embeddings":
            cosine = embedding_cosine(model.word_embeddings())
            loss = base + self.cfg.lam * cosine
        else:
            loss, cosine = cosreg_loss(base, model.last_layer_tokens(output), self.cfg.lam)
        return CriterionOutput(loss, {"task_loss": base.detach(), "penalty": (loss - base).detach(),
                                      "cosine": cosine.detach()})
