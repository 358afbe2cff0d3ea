"""Sigma_S, the shrinkage target of IsoScore*, kept current and identical on every rank by the :class:`ShrinkageHook`.

>>> [points_quota(250_000, rank, 3) for rank in range(3)]
[83334, 83333, 83333]
"""
from __future__ import annotations

import time
from typing import Any

import torch
from tqdm.auto import tqdm

from ..hooks import Hook, RunView
from ..isotropy import CovarianceAccumulator, isoscore_from_cov, score_text
from ..isotropy.streaming import LayerStatistics
from ..models.token_cloud import stream_token_statistics


def shrinkage_shard(num_examples: int, seed: int, epoch: int, rank: int, world_size: int) -> list[int]:
    """This rank's slice of a seeded permutation of the training set (disjoint across ranks)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_examples, generator=generator).tolist()[rank::world_size]


def points_quota(total: int, rank: int, world_size: int) -> int:
    """Points this rank collects so that the ranks' quotas add up to ``total``."""
    return total // world_size + (1 if rank < total % world_size else 0)


@torch.no_grad()
def estimate_shrinkage_covariance(run: RunView, layers, total_points: int, epoch: int, train_mode: bool = False,
                                  cloud=None, include_padding: bool = False) -> CovarianceAccumulator:
    """Sigma_S's statistics from a no-grad pass over a seeded sample of the training data, pooled over ranks.
    ``cloud(model, output)``: the (n, d) points instead of the ``layers``' token states."""
    model = run.model
    quota = points_quota(total_points, run.rank, run.world_size)
    indices = shrinkage_shard(len(run.train_features), run.seed, epoch, run.rank, run.world_size)
    statistics = LayerStatistics(model.hidden_size, quota=quota, device=run.device)  # pooled: Sigma_S is the union
    size = run.eval_batch_size
    batches = (run.collate([run.train_features[i] for i in indices[start : start + size]])
               for start in range(0, len(indices), size) if not run.stop_requested)
    was_training = model.training
    model.train(train_mode)
    bar = tqdm(total=quota, desc="Sigma_S", unit="pt", disable=not run.show_progress, leave=False)
    try:
        stream_token_statistics(model, batches, statistics, layers=layers, include_padding=include_padding,
                                cloud=cloud, autocast=run.autocast, progress=bar.update)
    finally:
        bar.close()
        model.train(was_training)
    if run.world_size > 1:
        statistics.all_reduce()
    return statistics.union()


class ShrinkageHook(Hook):
    """Computes the criterion's Sigma_S at the start of each epoch that lacks a current one."""

    def __init__(self, criterion):
        self.criterion = criterion
        self.epoch_computed: int | None = None
        self.points_used = 0

    def on_epoch_start(self, run: RunView, epoch: int) -> None:
        if self.epoch_computed == epoch and self.criterion.shrinkage_cov is not None:
            # restored from a checkpoint taken during this epoch: keep it, do not recompute a different one
            self.criterion.shrinkage_cov = self.criterion.shrinkage_cov.to(run.device)
            return
        cfg = self.criterion.cfg
        started = time.perf_counter()
        accumulator = estimate_shrinkage_covariance(run, getattr(cfg, "layers", None), cfg.shrinkage_points, epoch,
                                                    train_mode=cfg.shrinkage_mode == "train",
                                                    cloud=getattr(self.criterion, "shrinkage_cloud", None),
                                                    include_padding=getattr(cfg, "padding", "exclude") == "include")
        if run.stop_requested:  # the pass ended early: a partial Sigma_S is no estimate; the loop stops now
            return
        if accumulator.count < 2:
            raise RuntimeError(f"Sigma_S: the training data gave only {accumulator.count} token vectors")
        covariance = accumulator.covariance()
        self.criterion.shrinkage_cov = covariance.float()
        self.epoch_computed, self.points_used = epoch, accumulator.count
        seconds = time.perf_counter() - started
        score = isoscore_from_cov(covariance).item()
        run.log({"sigma_s/points": accumulator.count, "sigma_s/seconds": seconds, "sigma_s/isoscore": score},
                step=run.step)
        run.say(f"Sigma_S (epoch {epoch}): {accumulator.count} points in {seconds:.1f} s, "
                f"its IsoScore {score_text(score)}")

    def state_dict(self) -> dict[str, Any]:
        cov = self.criterion.shrinkage_cov
        return {"epoch_computed": self.epoch_computed, "points_used": self.points_used,
                "shrinkage_cov": None if cov is None else cov.detach().cpu()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch_computed, self.points_used = state["epoch_computed"], state["points_used"]
        self.criterion.shrinkage_cov = state["shrinkage_cov"]
