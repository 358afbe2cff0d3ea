"""I-STAR inside sentence-transformers: :class:`IStarLoss` wraps any of its losses (``loss(features, labels) + lam *
(1 - IsoScore*(cloud, zeta, Sigma_S))`` over every layer's token embeddings, both terms returned for the trainer to
log); :class:`IsotropyEvaluator` measures the embeddings' isotropy and STS Spearman. Usage:
docs/sentence_embeddings.md. Needs ``pip install 'istar_plugin[st]'``."""
from __future__ import annotations

import logging
import time
from typing import Optional, Sequence

import torch
from torch import Tensor, nn
from sentence_transformers.sentence_transformer.evaluation import SentenceEvaluator
from transformers import TrainerCallback

from ..criterions.shrinkage import points_quota, shrinkage_shard
from ..isotropy import isoscore_from_cov, isoscore_star
from ..isotropy.embeddings import embedding_measures
from ..isotropy.streaming import LayerStatistics, stream
from ..models.st_padding_free import PACKED_HIDDEN_STATES, transformer_module
from ..models.preflight import num_layers
from ..models.token_cloud import token_cloud
from ..posthoc import parse_transform

logger = logging.getLogger(__name__)

POINTS = ("tokens", "sentence")
EVALUATOR_MEASURES = ("isoscore", "average_cosine", "ev_1", "rankme", "uniformity")


class IStarLoss(nn.Module):
    """``loss`` plus I-STAR's penalty on the embeddings ``loss``'s forward passes produce."""

    citation = ("@inproceedings{rudman2024stable, title={Stable Anisotropic Regularization}, "
                "author={Rudman, William and Eickhoff, Carsten}, booktitle={ICLR}, year={2024}}")

    def __init__(self, model: nn.Module, loss: nn.Module, lam: float = -1.0, zeta: float = 0.2, points: str = "tokens",
                 layers: Optional[Sequence[int]] = None, shrinkage_sentences: Optional[Sequence[str]] = None,
                 shrinkage_points: int = 250_000, batch_size: int = 64, seed: int = 0):
        super().__init__()
        if points not in POINTS:
            raise ValueError(f"points {points!r}: choose one of {', '.join(POINTS)}")
        if not 0.0 <= zeta <= 1.0:
            raise ValueError(f"zeta must lie in [0, 1] (0: no shrinkage), got {zeta}")
        if zeta > 0 and not shrinkage_sentences:
            raise ValueError(f"zeta = {zeta} > 0 shrinks toward Sigma_S: pass shrinkage_sentences "
                             "(e.g. the training sentences)")
        if shrinkage_points < 2:
            raise ValueError(f"shrinkage_points must be at least 2, got {shrinkage_points}")
        self.model, self.loss = model, loss  # children, as sentence-transformers losses hold them (DDP swaps both)
        self.lam, self.zeta, self.points, self.seed = float(lam), float(zeta), points, seed
        self.shrinkage_sentences = list(shrinkage_sentences or ())
        self.shrinkage_points, self.batch_size = shrinkage_points, batch_size
        self.shrinkage_cov, self.refreshes, self._callback_in_use = None, 0, False
        config = transformer_module(model).auto_model.config
        count = num_layers(config)
        self.layers = list(layers) if layers is not None else list(range(1, count + 1))
        if bad := [layer for layer in self.layers if not -count - 1 <= layer <= count]:
            raise ValueError(f"layers {bad} are outside the model's hidden states: 0 (embeddings) to {count}")
        if points == "tokens" and self.layers != [count] and self.layers != [-1]:
            config.output_hidden_states = True  # every layer's token embeddings come out as all_layer_embeddings

    def cloud(self, output: dict[str, Tensor]) -> list[Tensor]:
        """The points one forward pass contributes: (n, d) tensors, padding excluded."""
        if self.points == "sentence":
            return [output["sentence_embedding"]]
        if PACKED_HIDDEN_STATES in output:  # a padding-free forward's: every position of its packed row is a token
            return token_cloud(output[PACKED_HIDDEN_STATES], None, self.layers)
        if "all_layer_embeddings" in output:
            return token_cloud(output["all_layer_embeddings"], output["attention_mask"], self.layers)
        return token_cloud([output["token_embeddings"]], output["attention_mask"], [0])  # the last layer alone

    def forward(self, sentence_features, labels: Tensor) -> dict[str, Tensor]:
        if self.training and self.zeta > 0 and self.shrinkage_cov is None:
            if not self._callback_in_use:
                logger.warning("IStarLoss: Sigma_S computed at the first step and kept: add loss.callback() to the "
                               "trainer's callbacks to refresh it after every epoch")
            self.refresh_shrinkage()
        captured: list[dict[str, Tensor]] = []
        handle = self.model.register_forward_hook(lambda module, args, output: captured.append(output))
        try:
            task = self.loss(sentence_features, labels)
        finally:
            handle.remove()
        terms = dict(task) if isinstance(task, dict) else {"task": task}
        chunks = [chunk for output in captured for chunk in self.cloud(output)]
        score = isoscore_star(chunks, self.shrinkage_cov, self.zeta)
        terms["istar"] = self.lam * (1 - score)
        return terms

    @torch.no_grad()
    def refresh_shrinkage(self) -> Tensor:
        """Sigma_S (kept as ``shrinkage_cov``) from a pass over a seeded sample of ``shrinkage_sentences``."""
        import torch.distributed as dist

        distributed = dist.is_available() and dist.is_initialized()
        rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
        started = time.perf_counter()
        model = self.model.module if hasattr(self.model, "module") else self.model
        order = shrinkage_shard(len(self.shrinkage_sentences), self.seed, self.refreshes, rank, world)
        statistics = LayerStatistics(quota=points_quota(self.shrinkage_points, rank, world))  # pooled: one Sigma_S
        batches = ([self.shrinkage_sentences[i] for i in order[start : start + self.batch_size]]
                   for start in range(0, len(order), self.batch_size))
        was_training = model.training
        model.eval()
        try:
            stream(statistics, batches, lambda batch: self.cloud(model(device_features(model, batch))))
        finally:
            model.train(was_training)
        if statistics.count == 0:
            raise ValueError("IStarLoss: shrinkage_sentences gave no points")
        if distributed:
            statistics.all_reduce()
        accumulator = statistics.union()
        self.shrinkage_cov = accumulator.covariance().float()
        self.refreshes += 1
        logger.info("IStarLoss: Sigma_S from %d points in %.1f s, its IsoScore %.4f", accumulator.count,
                    time.perf_counter() - started, isoscore_from_cov(self.shrinkage_cov).item())
        return self.shrinkage_cov

    def callback(self) -> TrainerCallback:
        """A trainer callback computing Sigma_S before training and after every epoch (the paper's schedule)."""
        return _ShrinkageCallback(self)


def device_features(model, sentences: list) -> dict:
    """The model's input features for ``sentences``, on its device."""
    features = model.preprocess(sentences) if hasattr(model, "preprocess") else model.tokenize(sentences)
    return {key: value.to(model.device) if isinstance(value, Tensor) else value for key, value in features.items()}


class _ShrinkageCallback(TrainerCallback):
    def __init__(self, loss: IStarLoss):
        self.loss = loss

    def on_train_begin(self, args, state, control, **kwargs):
        self.loss._callback_in_use = True
        if self.loss.zeta > 0:
            self.loss.refresh_shrinkage()

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.loss.zeta > 0:
            self.loss.refresh_shrinkage()


class IsotropyEvaluator(SentenceEvaluator):
    """Isotropy (given ``scores``, STS Spearman x 100 too) of sentence embeddings, raw and after each transform."""

    def __init__(self, sentences1: Sequence[str], sentences2: Optional[Sequence[str]] = None,
                 scores: Optional[Sequence[float]] = None, name: str = "isotropy", batch_size: int = 64,
                 transforms: Sequence[str] = (), fit_sentences: Optional[Sequence[str]] = None):
        super().__init__()
        if scores is not None and (sentences2 is None or not len(scores) == len(sentences1) == len(sentences2)):
            raise ValueError("scores need sentences2 and one score per pair")
        if transforms and not fit_sentences:
            raise ValueError("transforms are fitted on fit_sentences: pass them (e.g. training sentences)")
        self.sentences = list(sentences1) + list(sentences2 or ())
        self.scores = list(scores) if scores is not None else None
        self.name, self.batch_size = name, batch_size
        self.transforms = [parse_transform(spec) for spec in transforms]
        self.fit_sentences = list(fit_sentences or ())
        self.primary_metric = "spearman" if self.scores is not None else "isoscore"

    def measures(self, embeddings: Tensor) -> dict[str, float]:
        """The evaluator's :func:`~istar_plugin.isotropy.embeddings.embedding_measures` of ``embeddings``."""
        names = EVALUATOR_MEASURES + (("spearman",) if self.scores is not None else ())
        return embedding_measures(embeddings, self.scores, names=names)

    def by_transform(self, model) -> dict[str, dict[str, float]]:
        """``{"none": measures, transform name: measures, ...}`` from one encoding of the sentences."""
        def encode(sentences):
            return model.encode(list(sentences), batch_size=self.batch_size, convert_to_tensor=True,
                                show_progress_bar=False).cpu()

        embeddings = encode(self.sentences)
        results = {"none": self.measures(embeddings)}
        if self.transforms:
            fit = encode(self.fit_sentences).double()
            for transform in self.transforms:
                results[transform.name] = self.measures(transform.fit(fit)(embeddings.double()))
        return results

    def __call__(self, model, output_path: Optional[str] = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        metrics = {(key if name == "none" else f"{name}_{key}"): value
                   for name, measures in self.by_transform(model).items() for key, value in measures.items()}
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics
