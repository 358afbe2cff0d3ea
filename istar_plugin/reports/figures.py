"""What every report figure shares: a headless figure (one axis, or panels), one style, a PNG write, :class:`Figure`."""
from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from ..storage.atomic import atomic_write_bytes

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DPI = 130


@dataclass(frozen=True)
class Figure:
    """An output figure: ``draw(inputs, path)`` draws ``points(inputs)``; ``why_not`` (text or function): why none."""

    name: str
    points: Callable[[Any], Any]
    draw: Callable[[Any, Path], Path]
    why_not: Union[str, Callable[[Any], str]]

    def missing(self, inputs: Any) -> Optional[str]:
        """``NAME not written: WHY`` when the inputs give nothing to draw; None when they do."""
        if self.points(inputs):
            return None
        return f"{self.name} not written: {self.why_not(inputs) if callable(self.why_not) else self.why_not}"


def write_figures(figures: Sequence[Figure], inputs: Any, out: Path) -> list[str]:
    """Draw each figure the inputs give points to into ``out``; ``NAME not written: WHY`` for each other."""
    whys = [figure.missing(inputs) for figure in figures]
    for figure, why in zip(figures, whys):
        if why is None:
            figure.draw(inputs, out / figure.name)
    return [why for why in whys if why is not None]


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend, imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def style(ax, title: str, xlabel: str, ylabel: str, title_size: float = 10) -> None:
    """The reports' axis style: title, labels, small ticks, a light grid."""
    ax.set_title(title, fontsize=title_size)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.3)


def single(title: str, xlabel: str, ylabel: str, width: float = 7.0, height: float = 4.2):
    """``(fig, ax)``: one styled axis."""
    fig, ax = pyplot().subplots(figsize=(width, height), dpi=DPI, layout="constrained")
    style(ax, title, xlabel, ylabel)
    return fig, ax


def panels(count: int, width: float = 4.8, height: float = 3.6, margin: float = 1.2, min_width: float = 0.0):
    """``(fig, axes)``: ``count`` panels in rows of at most three (unused grid slots hidden)."""
    columns = min(3, count)
    rows = math.ceil(count / columns)
    figsize = (max(min_width, 0.6 + width * columns), margin + height * rows)
    fig, axes = pyplot().subplots(rows, columns, figsize=figsize, dpi=DPI, squeeze=False, layout="constrained")
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:count])


def save_png(fig, path: str | os.PathLike) -> Path:
    """Write ``fig`` to ``path`` as PNG atomically and close it; returns the path."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    pyplot().close(fig)
    return atomic_write_bytes(path, buffer.getvalue())
