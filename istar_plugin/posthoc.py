"""Post-hoc transforms of embeddings (rows are points), fitted on one set and applied to any other, by spec:
``none``, ``center``, ``whiten:K`` (Su et al. 2021), ``abtt:D`` (all-but-the-top, Mu & Viswanath 2018); ``+``
composes them left to right (``center+abtt:2``); a comma-separated list names several to compare.

>>> x = torch.randn(500, 6, dtype=torch.float64) @ torch.randn(6, 6, dtype=torch.float64) + 3
>>> whiten = parse_transform("whiten:6").fit(x)
>>> torch.allclose(torch.cov(whiten(x).T, correction=0), torch.eye(6, dtype=torch.float64), atol=1e-8)
True
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

TRANSFORM_CHOICES = "none, center, whiten:K (K kept dimensions), abtt:D (D top directions removed); compose with +"
RELATIVE_FLOOR = 1e-10  # a kept direction whose variance is below this share of the largest is no direction


class Transform:
    """``none``, the identity, and the base of the transforms: :meth:`fit` on points, then called on points as wide."""

    name: str = "none"

    def fit(self, points: Tensor) -> "Transform":
        return self

    def __call__(self, points: Tensor) -> Tensor:
        return points

    def state_dict(self) -> dict[str, Tensor]:
        return {}

    def out_dim(self, dim: int) -> int:
        """The width of the transformed points for inputs of width ``dim``; a ValueError if it cannot apply."""
        return dim


class Center(Transform):
    """``center``: subtract the fit set's mean, as whiten and abtt do first (``fitted``: the fitted tensors' names)."""

    name = "center"
    fitted: tuple[str, ...] = ("mean",)

    def __init__(self) -> None:
        self.mean: Optional[Tensor] = None

    def fit(self, points: Tensor) -> "Center":
        if points.ndim != 2 or points.shape[0] < 2:
            raise ValueError(f"{self.name}: fitting needs at least 2 points as rows of an (n, d) matrix, "
                             f"got shape {tuple(points.shape)}")
        self.out_dim(points.shape[1])
        x = points.detach().to(torch.float64)
        self.mean = x.mean(dim=0)
        self._fit_centred(x - self.mean)
        return self

    def _fit_centred(self, centred: Tensor) -> None:
        pass

    def _centred(self, points: Tensor) -> Tensor:
        if self.mean is None:
            raise RuntimeError(f"{self.name}: call fit(points) before applying it")
        if points.shape[-1] != self.mean.shape[0]:
            raise ValueError(f"{self.name} was fitted on width {self.mean.shape[0]}, "
                             f"got points of width {points.shape[-1]}")
        return points.to(torch.float64) - self.mean.to(points.device)

    def state_dict(self) -> dict[str, Tensor]:
        return {name: getattr(self, name) for name in self.fitted}

    def __call__(self, points: Tensor) -> Tensor:
        return self._centred(points).to(points.dtype)


def _principal_axes(centred: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (descending) and eigenvectors (columns) of the population covariance of centred rows."""
    values, vectors = torch.linalg.eigh(centred.T @ centred / centred.shape[0])
    return values.flip(0), vectors.flip(1)


class Whiten(Center):
    """``whiten:K`` (Su et al. 2021): ``(x - mean) U_K diag(lambda_K)^-1/2``, the top ``K`` axes at unit variance."""

    fitted = ("mean", "matrix")

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k, self.name = k, f"whiten:{k}"
        self.matrix: Optional[Tensor] = None

    def _fit_centred(self, centred: Tensor) -> None:
        values, vectors = _principal_axes(centred)
        kept = values[: self.k]
        if kept[-1] <= RELATIVE_FLOOR * values[0]:
            rank = int((values > RELATIVE_FLOOR * values[0]).sum())
            raise ValueError(f"whiten:{self.k}: the fit set ({centred.shape[0]} points) spans only {rank} directions; "
                             f"keep at most {rank} or fit on more points")
        self.matrix = vectors[:, : self.k] / kept.sqrt()

    def __call__(self, points: Tensor) -> Tensor:
        return (self._centred(points) @ self.matrix.to(points.device)).to(points.dtype)

    def out_dim(self, dim: int) -> int:
        if self.k > dim:
            raise ValueError(f"whiten:{self.k} keeps more dimensions than the embeddings have ({dim})")
        return self.k


class AllButTheTop(Center):
    """``abtt:D`` (Mu & Viswanath 2018): remove the mean and the projections on the top ``D`` principal directions."""

    fitted = ("mean", "directions")

    def __init__(self, d: int) -> None:
        super().__init__()
        self.d, self.name = d, f"abtt:{d}"
        self.directions: Optional[Tensor] = None

    def _fit_centred(self, centred: Tensor) -> None:
        self.directions = _principal_axes(centred)[1][:, : self.d]

    def __call__(self, points: Tensor) -> Tensor:
        centred = self._centred(points)
        directions = self.directions.to(points.device)
        return (centred - centred @ directions @ directions.T).to(points.dtype)

    def out_dim(self, dim: int) -> int:
        if self.d >= dim:
            raise ValueError(f"abtt:{self.d} removes all {dim} dimensions of the embeddings; D must be smaller")
        return dim


class Chain(Transform):
    """``a+b``: ``b`` fitted on ``a``'s output, applied after it."""

    def __init__(self, parts: list[Transform]) -> None:
        self.parts = parts
        self.name = "+".join(part.name for part in parts)

    def fit(self, points: Tensor) -> "Chain":
        for part in self.parts:
            points = part.fit(points)(points)
        return self

    def __call__(self, points: Tensor) -> Tensor:
        for part in self.parts:
            points = part(points)
        return points

    def state_dict(self) -> dict[str, Tensor]:
        return {f"{index}.{key}": value for index, part in enumerate(self.parts)
                for key, value in part.state_dict().items()}

    def out_dim(self, dim: int) -> int:
        for part in self.parts:
            dim = part.out_dim(dim)
        return dim


def parse_transform(spec: str) -> Transform:
    """One transform from its spec (``whiten:256``, ``center+abtt:2``); an unknown one is a one-line ValueError."""
    parts = [part.strip() for part in spec.split("+")]
    if len(parts) > 1:
        return Chain([parse_transform(part) for part in parts])
    kind, _, value = parts[0].partition(":")
    if kind in ("none", "center") and not value:
        return Transform() if kind == "none" else Center()
    if kind in ("whiten", "abtt") and value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"transform {spec!r}: {value!r} is not a positive whole number; "
                             f"choices: {TRANSFORM_CHOICES}")
        return (Whiten if kind == "whiten" else AllButTheTop)(int(value))
    raise ValueError(f"unknown transform {spec!r}; choices: {TRANSFORM_CHOICES}")


def parse_transforms(text: str) -> list[Transform]:
    """The transforms of a comma-separated list, in order; a name given twice is an error."""
    transforms = [parse_transform(spec.strip()) for spec in text.split(",") if spec.strip()]
    if not transforms:
        raise ValueError(f"no transform named in {text!r}; choices: {TRANSFORM_CHOICES}")
    names = [transform.name for transform in transforms]
    if repeated := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"transform {repeated[0]!r} is named twice in {text!r}")
    return transforms
