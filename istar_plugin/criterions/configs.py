"""The criterions' config dataclasses and their compose-time checks, without torch: what ``compose`` reads.

Each registered criterion class inherits its ``...Setup`` class here, so ``check_setup``, ``check_hidden_size`` (and
``needs_init_from``) are one definition, reachable from the class and, before the class is imported, from its
registry entry.

>>> IStarConfig(zeta=0.5).zeta
0.5
>>> FlowSetup.check_setup(FlowConfig(), object, "extractive_qa")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: criterion=flow needs a model adapter that can insert a module before the head (insert_before_head()); ...
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ..settings import check_fields, setting

__all__ = ["CrossEntropyConfig", "CosRegConfig", "IStarConfig", "SpectrumConfig", "FlowConfig", "IsoLayerConfig",
           "CriterionSetup", "CosRegSetup", "SpectrumSetup", "FlowSetup", "IsoLayerSetup", "TARGETS", "DECAYS",
           "DEFAULT_GAMMA", "WORD_EMBEDDINGS", "flow_memory_bytes", "physical_memory_bytes"]

TARGETS = ("hidden", "embeddings")
SHRINKAGE_MODES = ("eval", "train")
_UNIT = "{key} must lie in [0, 1], got {value}"
DECAYS = ("polynomial", "exponential")
DEFAULT_GAMMA = {"polynomial": -0.5, "exponential": 0.5}
WORD_EMBEDDINGS = "the word-embedding matrix"
"""What a penalty on the embedding weights names as its ``penalised_weights`` (LoRA freezes them)."""


class CriterionSetup:
    """What composing a config asks of a criterion before any model loads (:class:`~.task.Criterion` inherits it)."""

    needs_init_from = False  # True: the criterion trains a fine-tuned model (init_from= is required)

    @classmethod
    def check_setup(cls, cfg, adapter: type, kind: str) -> None:
        """Raise ValueError (one line, naming the value and the choices) if ``cfg`` cannot run with this model
        adapter class and task kind; called by ``compose`` before any model loads."""

    @classmethod
    def check_hidden_size(cls, cfg, hidden_size: int) -> None:
        """Raise ValueError (one line) if ``cfg`` cannot run on a model of this hidden size (e.g. what it adds would
        not fit in this machine's memory); called by ``compose`` when the model's config is on this machine."""


@dataclass
class CrossEntropyConfig:
    """The task loss alone (no configuration)."""


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


class CosRegSetup(CriterionSetup):
    """The compose-time half of criterion ``cosreg`` (its class inherits it): refuses what it cannot run."""

    @classmethod
    def check_setup(cls, cfg: CosRegConfig, adapter: type, kind: str) -> None:
        if cfg.target == "embeddings" and not callable(getattr(adapter, "word_embeddings", None)):
            raise ValueError(f"criterion.target=embeddings needs a model adapter with a word-embedding matrix "
                             f"(word_embeddings()); {adapter.__name__} has none; choose criterion.target=hidden")


@dataclass
class IStarConfig:
    lam: float = setting(-1.0, help="weight of the penalty 1 - IsoScore* (negative: towards anisotropy)")
    zeta: float = setting(0.2, help="shrinkage of the batch covariance towards Sigma_S", low=0, high=1, refused=_UNIT)
    shrinkage_points: int = setting(250_000, help="token states Sigma_S is estimated from", low=2,
                                    refused="{key} must be at least 2, got {value}")
    layers: Optional[list[int]] = setting(None, help="hidden_states indices (0 = embeddings, or START:STOP); None: "
                                          "every transformer layer")
    shrinkage_mode: str = setting("eval", help="dropout off (eval, the official code) or on (train) while Sigma_S is "
                                  "computed", choices=SHRINKAGE_MODES)
    distributed_cloud: str = setting("pooled", help='under DDP: "pooled" (all ranks\' tokens, as one GPU) or "local"',
                                     choices=("pooled", "local"))
    padding: str = setting("exclude", help='"include": padded positions are points too, in the penalty and Sigma_S '
                           "(official code)", choices=("exclude", "include"))

    def __post_init__(self) -> None:
        check_fields(self, "criterion.")
        if self.layers is not None and (not self.layers or len(set(self.layers)) < len(self.layers)):
            raise ValueError(f"criterion.layers={list(self.layers)} must name each layer once (1..L, or 0 for the "
                             "embeddings), or be null for every transformer layer")


@dataclass
class SpectrumConfig:
    """The paper gives no constants; these defaults were chosen by measurement on MiniLM: W with exactly these
    target singular values has I1 0.994 (``benchmarks/spectrum_formulation.py``), the 0.99-1.00 the paper
    reports under spectrum control; ``lam`` 1e-3 makes the penalty about 50x MiniLM's initial task loss."""

    decay: str = setting("polynomial", help="the targets' decay: polynomial c1 * k^gamma or exponential "
                         "c1 * exp(-c2 * k^gamma)", choices=DECAYS)
    lam: float = setting(1e-3, help="weight of the penalty", refused="{key} must be a finite number, got {value}")
    c1: float = setting(1.0, help="the largest target singular value", low=0, low_open=True,
                        refused="{key} must be a positive number (the largest target singular value), got {value}")
    c2: float = setting(0.1, help="exponential only: the rate")
    gamma: Optional[float] = setting(None, help="polynomial: < 0 (default -0.5); exponential: > 0 (default 0.5)")

    penalised_weights = WORD_EMBEDDINGS
    """The weights the penalty reads directly (see :attr:`CosRegConfig.penalised_weights`)."""

    def __post_init__(self) -> None:
        check_fields(self, "criterion.")
        if self.gamma is None:
            self.gamma = DEFAULT_GAMMA[self.decay]
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
    beta: float = setting(1.0, help="weight of the flow's NLL (nats per dimension)", low=0,
                          refused="{key} must be a non-negative number, got {value}")
    depth: int = setting(2, help="flow steps", low=1, refused="{key} must be at least 1 flow step, got {value}")
    width: int = setting(256, help="hidden units of each coupling network", low=1,
                         refused="{key} must be at least 1 hidden unit, got {value}")

    def __post_init__(self) -> None:
        check_fields(self, "criterion.")


BYTES_PER_TRAINED_PARAMETER = 16  # float32 weight, its gradient and AdamW's two moments


def flow_memory_bytes(dim: int, depth: int, width: int) -> int:
    """The bytes a flow of ``depth`` steps with couplings ``width`` wide takes on ``dim``-dimensional vectors while it
    trains: each parameter with its gradient and AdamW's two moments, and the buffers (float32 each). Per step:
    actnorm (2d), the LU linear map (2d^2 + d parameters, d^2 + d buffers) and a coupling network
    (kept -> width -> width -> 2 x changed, with biases), its halves alternating.

    >>> flow_memory_bytes(384, depth=2, width=256) / 1e6  # the default flow on MiniLM
    17.501184
    """
    def coupling(kept: int) -> int:
        return (kept + 1) * width + (width + 1) * width + (width + 1) * 2 * (dim - kept)

    even_steps, odd_steps = (depth + 1) // 2, depth // 2  # the even steps keep the first dim // 2 dimensions
    parameters = depth * (3 * dim + 2 * dim * dim) + even_steps * coupling(dim // 2) + odd_steps * coupling(
        dim - dim // 2)
    return BYTES_PER_TRAINED_PARAMETER * parameters + 4 * depth * (dim * dim + dim)


def physical_memory_bytes() -> Optional[int]:
    """This machine's physical memory (its pages times their size), None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no os.sysconf (Windows) or no such name
        return None


def decimal_size(count: float) -> str:
    """A byte count in decimal units.

    >>> decimal_size(17_501_184), decimal_size(25_276_502_016), decimal_size(6.4e20)
    ('17.5 MB', '25.3 GB', '640000.0 PB')
    """
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if count < 1000:
            return f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} PB"


class FlowSetup(CriterionSetup):
    """The compose-time half of criterion ``flow`` (its class inherits it): refuses what it cannot run."""

    @classmethod
    def check_hidden_size(cls, cfg: FlowConfig, hidden_size: int) -> None:
        needed, memory = flow_memory_bytes(hidden_size, cfg.depth, cfg.width), physical_memory_bytes()
        if memory is not None and needed > memory:
            raise ValueError(f"criterion.width={cfg.width}, criterion.depth={cfg.depth}: the flow on hidden size "
                             f"{hidden_size} needs about {decimal_size(needed)} for its parameters, their gradients "
                             f"and AdamW's state, more than this machine's {decimal_size(memory)} of memory; lower "
                             "criterion.width (default 256) or criterion.depth (default 2)")

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
    alpha: float = setting(0.5, help="the task loss's share of the joint loss", low=0, high=1, refused=_UNIT)
    smoothing: float = setting(0.15, help="the paper's s: smoothing of the running means", low=0, high=1,
                               low_open=True, refused="{key} must lie in (0, 1], got {value}")
    balance: bool = setting(True, help="balance the two losses by their running means")
    initial_means: str = setting("first_batch", help="the running means' start", choices=("first_batch", "one"))
    update: str = setting("after", help="normalise with the means before or after this batch's update",
                          choices=("after", "before"))
    detach_means: bool = setting(True, help="no gradient through the running means")
    restart_per_epoch: bool = setting(False, help="restart the balance's step count at each epoch")
    bias: bool = setting(True, help="the Isotropy Layer has a bias")
    eps: float = setting(1e-12, help="floor of IsoScore inside the log", low=0, low_open=True,
                         refused="{key} must be positive (it guards log 0), got {value}")
    zeta: float = setting(0.0, help="> 0: IsoScore* shrunk towards Sigma_S of the layer's outputs (beyond the paper)",
                          low=0, high=1, refused=_UNIT)
    shrinkage_points: int = setting(250_000, help="examples (one output each) for Sigma_S, capped by the training set",
                                    low=2, refused="{key} must be at least 2, got {value}")
    shrinkage_mode: str = setting("eval", help="dropout off (eval) or on (train) while Sigma_S is computed",
                                  choices=SHRINKAGE_MODES)

    def __post_init__(self) -> None:
        check_fields(self, "criterion.")


class IsoLayerSetup(CriterionSetup):
    """The compose-time half of criterion ``isolayer`` (its class inherits it): refuses what it cannot run."""

    needs_init_from = True  # config time: a pretrained encoder with a fresh head is no stage 1

    @classmethod
    def check_setup(cls, cfg, adapter: type, kind: str) -> None:
        if kind not in ("classification", "regression"):
            raise ValueError("criterion isolayer needs one representation per example before the head: it supports "
                             f"classification and regression tasks, not {kind} (whose head reads every token)")
        if not hasattr(adapter, "insert_before_head"):
            raise ValueError(f"criterion isolayer needs a model adapter with insert_before_head; {adapter.__name__} "
                             "has none")
