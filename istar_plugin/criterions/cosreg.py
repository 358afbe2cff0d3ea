"""CosReg (Gao et al. 2019): the task loss plus ``lam`` times a mean pairwise cosine, of tokens or embedding rows."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..registry import CRITERIONS
from ..settings import check_fields, setting
from .task import CriterionOutput, CrossEntropyCriterion, task_loss

if TYPE_CHECKING:
    from torch import Tensor

TARGETS = ("hidden", "embeddings")
WORD_EMBEDDINGS = "the word-embedding matrix"  # the penalised_weights of a penalty on the embedding weights


@dataclass
class CosRegConfig:
    lam: float = setting(1.0, help="weight of the mean pairwise cosine")
    target: str = setting("hidden", help="hidden: the batch's last-layer tokens; embeddings: the word-embedding "
                          "matrix's rows", choices=TARGETS)

    def __post_init__(self) -> None:
        check_fields(self, "criterion.")

    @property
    def penalised_weights(self) -> Optional[str]:
        """The weights the penalty reads directly (None: it reads hidden states)."""
        return WORD_EMBEDDINGS if self.target == "embeddings" else None


def cosreg_loss(loss: Tensor, last_layer_tokens: Tensor, lam: float) -> tuple[Tensor, Tensor]:
    """``loss + lam * mean cosine over pairs i != j``; returns (total, mean cosine)."""
    import torch

    from ..isotropy import average_cosine_similarity

    with torch.autocast(device_type=last_layer_tokens.device.type, enabled=False):
        cosine = average_cosine_similarity(last_layer_tokens.float())
    return loss + lam * cosine, cosine


def embedding_cosine(matrix: Tensor) -> Tensor:
    """``(1/|V|^2) sum_{i != j} cos(w_i, w_j)`` over the rows of ``matrix`` in O(|V| d); zero rows count as 0."""
    import torch

    from .modules import EmbeddingCosine

    with torch.autocast(device_type=matrix.device.type, enabled=False):
        return EmbeddingCosine.apply(matrix.float())


@CRITERIONS.register("cosreg", CosRegConfig)
class CosRegCriterion(CrossEntropyCriterion):
    """Task loss plus ``lam`` times the mean pairwise cosine of last-layer token states or word-embedding rows."""

    @classmethod
    def check_setup(cls, cfg: CosRegConfig, adapter: type, kind: str) -> None:
        if cfg.target == "embeddings" and not callable(getattr(adapter, "word_embeddings", None)):
            raise ValueError(f"criterion.target=embeddings needs a model adapter with a word-embedding matrix "
                             f"(word_embeddings()); {adapter.__name__} has none; choose criterion.target=hidden")

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        base = task_loss(self.kind, output, batch)
        if self.cfg.target == "embeddings":
            cosine = embedding_cosine(model.word_embeddings())
            loss = base + self.cfg.lam * cosine
        else:
            loss, cosine = cosreg_loss(base, model.last_layer_tokens(output), self.cfg.lam)
        return CriterionOutput(loss, {"task_loss": base.detach(), "penalty": (loss - base).detach(),
                                      "cosine": cosine.detach()})
