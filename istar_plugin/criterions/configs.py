"""The criterions' config dataclasses and their compose-time checks, without torch: what ``compose`` reads.

Each registered criterion class inherits its ``...Setup`` class here, so ``check_setup`` (and ``needs_init_from``)
are one definition, reachable from the class and, before the class is imported, from its registry entry.

>>> IStarConfig(zeta=0.5).zeta
0.5
>>> FlowSetup.check_setup(FlowConfig(), object, "extractive_qa")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: criterion=flow needs a model adapter that can insert a module before the head (insert_before_head()); ...
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

__all__ = ["CrossEntropyConfig", "CosRegConfig", "IStarConfig", "SpectrumConfig", "FlowConfig", "IsoLayerConfig",
           "CriterionSetup", "CosRegSetup", "SpectrumSetup", "FlowSetup", "IsoLayerSetup", "TARGETS", "DECAYS", "DEFAULT_GAMMA"]

TARGETS = ("hidden", "embeddings")
DECAYS = ("polynomial", "exponential")
DEFAULT_GAMMA = {"polynomial": -0.5, "exponential": 0.5}


class CriterionSetup:
    """What composing a config asks of a criterion before any model loads (:class:`~.task.Criterion` inherits it)."""

    needs_init_from = False  # True: the criterion trains a fine-tuned model (init_from= is required)

    @classmethod
    def check_setup(cls, cfg, adapter: type, kind: str) -> None:
        """Raise ValueError (one line, naming the value and the choices) if ``cfg`` cannot run with this model
        adapter class and task kind; called by ``compose`` before any model loads."""


@dataclass
class CrossEntropyConfig:
    """The task loss alone (no configuration)."""

@dataclass
class CosRegConfig:
    lam: float = 1.0
    target: str = "hidden"  # hidden: the batch's last-layer tokens; embeddings: the word-embedding matrix's rows

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"criterion.target {self.target!r} unknown; choose one of: {', '.join(TARGETS)}")

class CosRegSetup(CriterionSetup):
    """The compose-time half of criterion ``cosreg`` (its class inherits it): refuses what it cannot run."""

    @classmethod
    def check_setup(cls, cfg: CosRegConfig, adapter: type, kind: str) -> None:
        if cfg.target == "embeddings" and not callable(getattr(adapter, "word_embeddings", None)):
            raise ValueError(f"criterion.target=embeddings needs a model adapter with a word-embedding matrix "
                             f"(word_embeddings()); {adapter.__name__} has none; choose criterion.target=hidden")


@dataclass
class IStarConfig:
    lam: float = -1.0
    zeta: float = 0.2
    shrinkage_points: int = 250_000
    layers: Optional[list[int]] = None  # hidden_states indices (0 = embeddings); None = every transformer layer
    shrinkage_mode: str = "eval"  # the official code computes Sigma_S with dropout off
    distributed_cloud: str = "pooled"  # under DDP: "pooled" (all ranks' tokens, as one GPU) or "local"
    padding: str = "exclude"  # "include": padded positions are points too, in the penalty and Sigma_S (official code)

    def __post_init__(self) -> None:
        if not 0.0 <= self.zeta <= 1.0:
            raise ValueError(f"criterion.zeta must lie in [0, 1], got {self.zeta}")
        if self.shrinkage_points < 2:
            raise ValueError(f"criterion.shrinkage_points must be at least 2, got {self.shrinkage_points}")
        if self.shrinkage_mode not in ("eval", "train"):
            raise ValueError(f"criterion.shrinkage_mode {self.shrinkage_mode!r} unknown; choose one of: eval, train")
        if self.distributed_cloud not in ("pooled", "local"):
            raise ValueError(f"criterion.distributed_cloud {self.distributed_cloud!r} unknown; choose one of: pooled, local")
        if self.padding not in ("exclude", "include"):
            raise ValueError(f"criterion.padding {self.padding!r} unknown; choose one of: exclude, include")
        if self.layers is not None and (not self.layers or len(set(self.layers)) < len(self.layers)):
            raise ValueError(f"criterion.layers={list(self.layers)} must name each layer once (1..L, or 0 for the "
                             "embeddings), or be null for every transformer layer")

@dataclass
class SpectrumConfig:
    """The paper gives no constants; these defaults were chosen by measurement on MiniLM: W with exactly these
    target singular values has I1 0.994 (``benchmarks/spectrum_formulation.py``), the 0.99-1.00 the paper
    reports under spectrum control; ``lam`` 1e-3 makes the penalty about 50x MiniLM's initial task loss."""

    decay: str = "polynomial"
    lam: float = 1e-3
    c1: float = 1.0
    c2: float = 0.1  # exponential only
    gamma: Optional[float] = None  # polynomial: < 0 (default -0.5); exponential: > 0 (default 0.5)

    def __post_init__(self) -> None:
        if self.decay not in DECAYS:
            raise ValueError(f"criterion.decay {self.decay!r} unknown; choose one of: {', '.join(DECAYS)}")
        if self.gamma is None:
            self.gamma = DEFAULT_GAMMA[self.decay]
        if not (math.isfinite(self.c1) and self.c1 > 0):
            raise ValueError(f"criterion.c1 must be a positive number (the largest target singular value), got {self.c1}")
        if not math.isfinite(self.lam):
            raise ValueError(f"criterion.lam must be a finite number, got {self.lam}")
        if self.decay == "polynomial" and not self.gamma < 0:
            raise ValueError(f"criterion.gamma={self.gamma} does not decay: polynomial c1 * k^gamma needs gamma < 0")
        if self.decay == "exponential" and not (self.gamma > 0 and self.c2 > 0):
            raise ValueError(f"criterion.gamma={self.gamma}, criterion.c2={self.c2} do not decay: exponential "
                             "c1 * exp(-c2 * k^gamma) needs gamma > 0 and c2 > 0")

class SpectrumSetup(CriterionSetup):
    """The compose-time half of criterion ``spectrum`` (its class inherits it): refuses what it cannot run."""

    @classmethod
    def check_setup(cls, cfg: SpectrumConfig, adapter: type, kind: str) -> None:
        if not callable(getattr(adapter, "word_embeddings", None)):
            raise ValueError(f"criterion=spectrum needs a model adapter with a word-embedding matrix "
                             f"(word_embeddings()); {adapter.__name__} has none")


@dataclass
class FlowConfig:
    beta: float = 1.0  # weight of the flow's NLL (nats per dimension)
    depth: int = 2  # flow steps
    width: int = 256  # hidden units of each coupling network

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"criterion.depth must be at least 1 flow step, got {self.depth}")
        if self.width < 1:
            raise ValueError(f"criterion.width must be at least 1 hidden unit, got {self.width}")
        if not (math.isfinite(self.beta) and self.beta >= 0):
            raise ValueError(f"criterion.beta must be a non-negative number, got {self.beta}")

class FlowSetup(CriterionSetup):
    """The compose-time half of criterion ``flow`` (its class inherits it): refuses what it cannot run."""

    @classmethod
    def check_setup(cls, cfg: FlowConfig, adapter: type, kind: str) -> None:
        if not callable(getattr(adapter, "insert_before_head", None)):
            raise ValueError(f"criterion=flow needs a model adapter that can insert a module before the head "
                             f"(insert_before_head()); {adapter.__name__} cannot")
        if kind not in ("classification", "regression"):
            raise ValueError(f"criterion=flow acts on one representation per example; task kind {kind!r} has none "
                             "(choose a classification or regression task)")


@dataclass
class IsoLayerConfig:
    alpha: float = 0.5
    smoothing: float = 0.15  # the paper's s
    balance: bool = True
    initial_means: str = "first_batch"  # first_batch | one
    update: str = "after"  # after | before: normalise with the means before or after this batch's update
    detach_means: bool = True
    restart_per_epoch: bool = False
    bias: bool = True
    eps: float = 1e-12  # floor of IsoScore inside the log
    zeta: float = 0.0  # > 0: IsoScore* shrunk towards Sigma_S of the layer's outputs (beyond the paper)
    shrinkage_points: int = 250_000  # examples (one output each) for Sigma_S, capped by the training set
    shrinkage_mode: str = "eval"

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"criterion.alpha must lie in [0, 1], got {self.alpha}")
        if not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"criterion.smoothing must lie in (0, 1], got {self.smoothing}")
        if not 0.0 <= self.zeta <= 1.0:
            raise ValueError(f"criterion.zeta must lie in [0, 1], got {self.zeta}")
        if not self.eps > 0:
            raise ValueError(f"criterion.eps must be positive (it guards log 0), got {self.eps}")
        if self.shrinkage_points < 2:
            raise ValueError(f"criterion.shrinkage_points must be at least 2, got {self.shrinkage_points}")
        for name, choices in (("initial_means", ("first_batch", "one")), ("update", ("after", "before")),
                              ("shrinkage_mode", ("eval", "train"))):
            if getattr(self, name) not in choices:
                raise ValueError(f"criterion.{name} {getattr(self, name)!r} unknown; choose one of: {', '.join(choices)}")

class IsoLayerSetup(CriterionSetup):
    """The compose-time half of criterion ``isolayer`` (its class inherits it): refuses what it cannot run."""

    needs_init_from = True  # config time: a pretrained encoder with a fresh head is no stage 1

    @classmethod
    def check_setup(cls, cfg, adapter: type, kind: str) -> None:
        if kind not in ("classification", "regression"):
            raise ValueError("criterion isolayer needs one representation per example before the head: it supports "
                             f"classification and regression tasks, not {kind} (whose head reads every token)")
        if not hasattr(adapter, "insert_before_head"):
            raise ValueError(f"criterion isolayer needs a model adapter with insert_before_head; {adapter.__name__} has none")
