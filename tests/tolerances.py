"""How closely two fp32 computations of one quantity must agree when their kernels add terms in other orders (other
batch compositions, padding or packing, one sequence alone or among others), on any CPU the project supports (AVX2
or AVX512, with or without bf16 instructions): the tolerance follows from the computation's own rounding on the CPU
the test runs on, measured against the same computation in float64, never from a number seen on one machine.

Both computations run twice, in float32 and in float64 (``module.double()``). Then

- the float64 twins must agree within :data:`FP64_AGREEMENT` unit roundoffs of fp32 at their magnitude: they differ
  only by float64 rounding (about 1e-16) and, where a result is stored as float32, by that one cast; a wrong token, a
  padding token counted or a wrong layer moves them by orders of magnitude more;
- the float32 results must agree within :data:`ROUNDING_FACTOR` times the larger of the two fp32 computations'
  measured distances from their float64 twins (at least one fp32 unit roundoff of the magnitude).

A whole training run cannot be run in float64 beside another process's fp32 run (two torchrun ranks against one
process): there :func:`relative_rounding` measures the single process's fp32 run against its float64 twin, and the
ranks' results must lie within :data:`ROUNDING_FACTOR` times that of the single process's. Where a result is an fp32
cross-entropy by design (the package casts logits to float32 for it), :func:`cross_entropy_rounding` bounds its
rounding instead. Where the two computations can be made the same (the same batches in the same order), tests
compare them exactly and need nothing from here.

>>> import torch
>>> torch.manual_seed(0) and None
>>> w, x = torch.randn(64, 8), torch.randn(3, 64)
>>> among = lambda w, x: (x @ w)[1]  # a row computed in a batch of three
>>> alone = lambda w, x: (x[1:2] @ w)[0]  # the same row alone
>>> fp32 = among(w, x), alone(w, x)
>>> fp64 = among(w.double(), x.double()), alone(w.double(), x.double())
>>> assert_same_computation(fp32, fp64)  # passes: the same function, rounded differently at most
>>> wrong = alone(w.double(), x.double() * (torch.arange(64) != 5))  # one of the 64 terms left out
>>> assert_same_computation(fp32, (fp64[0], wrong))  # doctest: +ELLIPSIS
Traceback (most recent call last):
AssertionError: the float64 computations differ by ...
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

FP32_UNIT_ROUNDOFF = 2.0**-24  # the largest relative error of rounding a real number to float32
FP64_AGREEMENT = 2  # float64 twins, each possibly rounded once to float32 on its way out: 2 unit roundoffs of fp32
ROUNDING_FACTOR = 4  # |a32 - b32| <= |a32 - a64| + |a64 - b64| + |b64 - b32|: 2 measured distances, and as much
# again for the float64 twins' own agreement (up to FP64_AGREEMENT unit roundoffs, no more than 2 measured distances)


def _largest(tensor: torch.Tensor) -> float:
    return tensor.double().abs().max().item() if tensor.numel() else 0.0


def fp32_rounding(fp32: torch.Tensor, fp64: torch.Tensor) -> float:
    """How far an fp32 computation lies from its float64 twin (the same code on the same inputs in float64), in
    the largest element: its rounding on this CPU; at least one fp32 unit roundoff of the twin's magnitude.

    >>> fp32_rounding(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 3.0], dtype=torch.float64)) == 3 * 2**-24
    True
    """
    return max(_largest(fp32.double() - fp64), FP32_UNIT_ROUNDOFF * _largest(fp64))


def rounding_tolerance(fp32: Sequence[torch.Tensor], fp64: Sequence[torch.Tensor]) -> float:
    """The allowed largest difference between the fp32 computations ``fp32`` of one quantity whose float64 twins
    are ``fp64``: :data:`ROUNDING_FACTOR` times the larger of their :func:`fp32_rounding`."""
    return ROUNDING_FACTOR * max(fp32_rounding(a, b) for a, b in zip(fp32, fp64, strict=True))


def assert_same_computation(fp32: Sequence[torch.Tensor], fp64: Sequence[torch.Tensor], what: str = "") -> None:
    """Two computations ``fp32 = (a, b)`` of one quantity and their float64 twins ``fp64``: the twins agree to
    float64 rounding (:data:`FP64_AGREEMENT`) and the fp32 results within :func:`rounding_tolerance`."""
    (a32, b32), (a64, b64) = fp32, fp64
    label = f"{what}: " if what else ""
    agreement = FP64_AGREEMENT * FP32_UNIT_ROUNDOFF * _largest(a64)
    apart = _largest(a64 - b64)
    assert apart <= agreement, f"{label}the float64 computations differ by {apart:.3g} (allowed {agreement:.3g})"
    tolerance = rounding_tolerance(fp32, fp64)
    apart = _largest(a32.double() - b32.double())
    assert apart <= tolerance, (f"{label}the fp32 computations differ by {apart:.3g}, more than {ROUNDING_FACTOR} "
                                f"times their rounding ({tolerance:.3g} allowed)")


def cross_entropy_rounding(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """How far an fp32 mean cross-entropy of ``logits`` (tokens, vocabulary) against ``targets`` may lie from the
    exact one, whatever order its kernels add in: each token's ``log(sum_j exp(z_j - m)) - (z_y - m)`` rounds the
    differences (``u * range``), the exponentials (``2u`` each, relative) and the sum of V terms (``(V - 1) u``,
    relative, so as much absolute after the log), the log and the subtraction (``u * nll``); the mean of T of them
    adds ``T u`` relative. First order in the unit roundoff u; a bound on every CPU, not a measurement.

    >>> import math
    >>> z = torch.zeros(2, 8, dtype=torch.float64)  # two tokens, uniform over 8: nll log 8, range 0
    >>> cross_entropy_rounding(z, torch.tensor([0, 3])) == (8 + 3 + 3 * math.log(8)) * 2**-24
    True
    """
    logits = logits.double()
    nll = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    spread = (logits.amax(dim=-1) - logits.amin(dim=-1)).max().item()
    tokens, vocabulary = logits.shape
    return FP32_UNIT_ROUNDOFF * (vocabulary + 3 + spread + (tokens + 1) * nll.max().item())


def relative_rounding(fp32: Sequence[float], fp64: Sequence[float]) -> float:
    """The largest relative distance of a run's fp32 results ``fp32`` from those of its float64 twin ``fp64`` (the
    same run with the model in float64), at least one fp32 unit roundoff: how far this CPU's fp32 rounding moved that
    computation, per unit of magnitude, wherever in the run it was largest.

    >>> relative_rounding([1.0, 2.0 + 2**-21], [1.0, 2.0]) == 2**-22
    True
    """
    return max(FP32_UNIT_ROUNDOFF, *(abs(a - b) / abs(b) for a, b in zip(fp32, fp64, strict=True) if b != 0))
