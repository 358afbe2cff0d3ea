"""A value summarised over seeds: mean, sample standard deviation and count; one seed has no spread, so its
standard deviation is undefined (None), shown as :data:`UNDEFINED`.

>>> over_seeds([92.5, 93.5])
SeedSummary(mean=93.0, std=0.7071067811865476, n=2)
>>> over_seeds([92.5, 93.5]).text(".2f"), over_seeds([92.5]).text(".2f"), over_seeds([92.5]).std
('93.00 ± 0.71', '92.50 ± —', None)
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Optional

UNDEFINED = "—"


@dataclass(frozen=True)
class SeedSummary:
    """The mean, sample standard deviation (None for one seed) and number of seeds of a value."""

    mean: float
    std: Optional[float]
    n: int

    def text(self, spec: str) -> str:
        """``mean ± std`` formatted with ``spec`` (``mean ± —`` for one seed)."""
        return f"{self.mean:{spec}} ± {std_text(self.std, spec)}"


def std_text(std: Optional[float], spec: str) -> str:
    """A standard deviation formatted with ``spec``; :data:`UNDEFINED` for one seed's (None)."""
    return UNDEFINED if std is None else format(std, spec)


def std_over_seeds(values: Iterable[float]) -> Optional[float]:
    """The sample standard deviation of ``values``; None for fewer than two."""
    values = list(values)
    return statistics.stdev(values) if len(values) > 1 else None


def over_seeds(values: Iterable[float]) -> SeedSummary:
    """The :class:`SeedSummary` of ``values`` (at least one)."""
    values = list(values)
    return SeedSummary(statistics.fmean(values), std_over_seeds(values), len(values))
