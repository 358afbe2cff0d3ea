"""Evaluation: the task's metrics, IsoScore* of the evaluation token cloud (overall and per layer), the isotropy of
what the classifier's head sees (one vector per example) and I1/I2 of the word embeddings.

>>> axes = torch.diag(torch.tensor([4., 1, 1, 1, 1, 1, 1, 1]))  # variances 16 : 1 : ... : 1
>>> [round(v, 2) for v in head_input_isotropy(torch.cat([axes, -axes]))["cls_explained_variance"]]
[0.7, 0.74, 0.78]
>>> head_input_isotropy(torch.ones(5, 8))  # a collapsed representation has no principal directions
{'cls_isoscore': None, 'cls_explained_variance': None}
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Optional, Sequence

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from ..criterions import next_token_nll
from ..isotropy import CovarianceAccumulator, explained_variance_ratio, isoscore, isoscore_from_cov, partition_isotropy
from ..isotropy.streaming import LayerStatistics, union_of
from ..metrics import collapsed
from ..models.token_cloud import stream_token_statistics
from .distributed import gather_to_all

EV_COMPONENTS = (1, 2, 3)


def head_input_isotropy(points: Tensor) -> dict[str, Any]:
    """``cls_isoscore`` and ``cls_explained_variance`` (EV_1..3) of ``points`` (n, d); None without variance."""
    points = torch.as_tensor(points).detach().to(torch.float64)
    if points.shape[0] < 2 or not bool((points - points[0]).abs().amax() > 0):
        return {"cls_isoscore": None, "cls_explained_variance": None}
    components = [k for k in EV_COMPONENTS if k <= points.shape[1]]
    return {"cls_isoscore": isoscore(points).item(),
            "cls_explained_variance": [explained_variance_ratio(points, k).item() for k in components]}


def embedding_isotropy(model) -> dict[str, float]:
    """I1 and I2 (partition-function isotropy) of the word-embedding matrix, when the model has one."""
    word_embeddings = getattr(model, "word_embeddings", None)
    if word_embeddings is None:
        return {}
    i1, i2 = partition_isotropy(word_embeddings().detach())
    return {"embedding_i1": i1.item(), "embedding_i2": i2.item()}


class Evaluator:
    """Scores the model on the evaluation split (or other features) with the task's metrics and isotropy."""

    def __init__(self, task, model, examples: Sequence[dict], features: Sequence[dict], *,
                 collate: Callable[[Sequence[dict]], dict[str, Tensor]], autocast: Callable[[], ContextManager],
                 batch_size: int, rank: int, world_size: int, device: torch.device, sort_by_length: bool,
                 show_progress: bool):
        self.task, self.model, self.examples, self.features = task, model, examples, features
        self.collate, self.autocast, self.batch_size = collate, autocast, batch_size
        self.rank, self.world_size, self.device = rank, world_size, device
        self.sort_by_length, self.show_progress = sort_by_length, show_progress
        self.last_predictions: Optional[tuple[list, list]] = None  # (predictions, references)
        self._frozen_layers: dict[int, tuple[Sequence[dict], list[CovarianceAccumulator]]] = {}

    def evaluate(self, examples: Optional[Sequence[dict]] = None, features: Optional[Sequence[dict]] = None,
                 isotropy: bool = True) -> dict[str, Any]:
        """Task metrics and, with ``isotropy``, IsoScore* overall and per layer and the head input's isotropy."""
        examples, features = (self.examples, self.features) if features is None else (examples, features)
        frozen = isotropy and getattr(self.model, "frozen_cache", None) is not None
        known = frozen and id(features) in self._frozen_layers
        outputs, per_layer = self.predict(features, isotropy, layers=not known)
        if frozen:  # a frozen backbone's token clouds are measured once per feature set
            per_layer = self._frozen_layers.setdefault(id(features), (features, per_layer))[1]
        return self.finish(outputs, per_layer if isotropy else None, examples, features, reduced=known)

    @torch.no_grad()
    def predict(self, features: Optional[Sequence[dict]] = None, isotropy: bool = True,
                layers: bool = True) -> tuple[dict[str, list], list[CovarianceAccumulator]]:
        """This rank's share of ``features`` through the model: its outputs, head inputs and token-cloud statistics."""
        features = self.features if features is None else features
        model = self.model
        was_training = model.training
        model.eval()
        indices = list(range(self.rank, len(features), self.world_size))
        if self.sort_by_length:
            indices.sort(key=lambda i: len(features[i]["input_ids"]), reverse=True)
        statistics = LayerStatistics(model.hidden_size, model.num_layers, device=self.device)
        on_device: dict[str, list] = {"logits": [], "head_input": []}  # each batch's, copied to the host at the end
        bar = tqdm(total=len(indices), desc="eval", unit="ex", disable=not self.show_progress, leave=False)
        head_only = getattr(model, "head_only", None) if getattr(model, "frozen_cache", None) is not None else None
        batches = (self.collate([features[i] for i in indices[start : start + self.batch_size]])
                   for start in range(0, len(indices), self.batch_size))

        def keep(batch: dict[str, Tensor], output) -> None:
            if isotropy and output.head_input is not None:
                on_device["head_input"].append(output.head_input.float())
            if self.task.kind == "extractive_qa":  # (batch, 2, length): the start and end logits
                on_device["logits"].append(torch.stack([output.start_logits, output.end_logits], dim=1).float())
            elif self.task.kind == "language_modeling":  # per text: its NLL sum and predicted tokens, not the logits
                nll, count = next_token_nll(output.logits, batch["input_ids"], output.attention_mask,
                                            getattr(output, "packing", None))
                on_device["logits"].append(torch.stack([nll, count.to(nll.dtype)], dim=1))
            else:
                on_device["logits"].append(output.logits.float())
            bar.update(batch["input_ids"].shape[0])

        with head_only() if head_only and not (isotropy and layers) else contextlib.nullcontext():
            stream_token_statistics(model, batches, statistics, autocast=self.autocast, on_output=keep,
                                    cloud=None if isotropy and layers else (lambda model, output: []))
        bar.close()
        model.train(was_training)
        outputs = {name: [row for part in parts for row in part.cpu().numpy()] for name, parts in on_device.items()}
        if self.task.kind == "extractive_qa":  # each feature's logits without its padding
            outputs["logits"] = [row[:, : len(features[i]["input_ids"])] for row, i in zip(outputs["logits"], indices)]
        return {"index": indices, **outputs}, statistics.layers

    def finish(self, outputs: dict[str, list], per_layer: Optional[list[CovarianceAccumulator]],
               examples: Sequence[dict], features: Sequence[dict], reduced: bool = False) -> dict[str, Any]:
        """Every rank's outputs gathered in feature order and scored; with ``per_layer``, the isotropy too."""
        if self.world_size > 1 and not reduced:
            for accumulator in per_layer or ():
                accumulator.all_reduce()
        gathered = gather_to_all(outputs, self.world_size)
        by_index = {index: row for part in gathered for index, row in zip(part["index"], part["logits"])}
        head_inputs = {index: row for part in gathered for index, row in zip(part["index"], part["head_input"])}
        ordered = [by_index[i] for i in range(len(features))]  # each feature exactly once
        if self.task.kind == "extractive_qa":
            width = max(row.shape[1] for row in ordered)  # the start and end logits, padded with -1e4
            model_outputs: Any = tuple(np.stack([np.pad(row[k], (0, width - row.shape[1]), constant_values=-1e4)
                                                 for row in ordered]) for k in (0, 1))
        else:
            model_outputs = np.stack(ordered)
        predictions, references = self.task.postprocess(examples, features, model_outputs)
        metrics = self.task.compute_metrics(predictions, references)
        self.last_predictions = (predictions, references)
        if per_layer is None:
            return metrics
        if head_inputs:  # one vector per example: classification and regression
            metrics.update(head_input_isotropy(np.stack([head_inputs[i] for i in range(len(features))])))
        result = {**metrics, "eval_isoscore_star": isoscore_from_cov(union_of(per_layer).covariance()).item(),
                  "eval_isoscore_star_per_layer": [isoscore_from_cov(a.covariance()).item() for a in per_layer],
                  **embedding_isotropy(self.model)}
        one_class = collapsed(self.task.kind, predictions)
        if one_class is not None:
            result["collapsed"] = one_class
        return result
