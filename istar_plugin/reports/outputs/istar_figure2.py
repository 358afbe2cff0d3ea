"""Figure 2 of Rudman & Eickhoff (2024): covariance shrinkage makes IsoScore* reliable for small samples.
``python -m istar_plugin.reports.outputs.istar_figure2 --out DIR [--seed 0] [--repeats 3]``."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from ...isotropy import CovarianceAccumulator, isoscore_from_cov, isoscore_star
from ...storage.atomic import atomic_write_text
from ..figures import pyplot, save_png
from ..tables import csv_text

LEADING_VARIANCES = (10.0, 6.0, 4.0, 4.0)
ZETAS = (0.0, 0.2, 0.4, 0.6, 0.8)
SIZES = tuple(int(round(n)) for n in np.geomspace(16, 50_000, 12))


def sample(variances: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """n float32 points from N(0, diag(variances))."""
    return torch.randn(n, len(variances), generator=generator) * variances.sqrt().float()


@torch.no_grad()
def run(sizes=SIZES, zetas=ZETAS, repeats=3, seed=0, dim=768, shrink_points=75_000) -> tuple[list[dict], float, float]:
    """Rows (zeta, n_points, mean, std) over repeats, the population IsoScore and IsoScore(Sigma_S)."""
    generator = torch.Generator().manual_seed(seed)
    variances = torch.tensor(LEADING_VARIANCES + (1.0,) * (dim - len(LEADING_VARIANCES)), dtype=torch.float64)
    accumulator = CovarianceAccumulator(dim)  # Sigma_S: the covariance of fresh points, streamed in chunks
    for start in range(0, shrink_points, 5000):
        accumulator.update(sample(variances, min(5000, shrink_points - start), generator))
    sigma_s = accumulator.covariance()
    scores = np.zeros((len(zetas), len(sizes), repeats))
    for r in range(repeats):
        for j, n in enumerate(sizes):
            points = sample(variances, n, generator)  # one draw scored at every zeta
            for i, zeta in enumerate(zetas):
                scores[i, j, r] = isoscore_star(points, sigma_s, zeta).item()
    rows = [{"zeta": zeta, "n_points": n, "mean": scores[i, j].mean(), "std": scores[i, j].std()}
            for i, zeta in enumerate(zetas) for j, n in enumerate(sizes)]
    return rows, isoscore_from_cov(torch.diag(variances)).item(), isoscore_from_cov(sigma_s).item()


def plot(rows: list[dict], population: float, shrink_score: float, path: Path, repeats: int) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=150)
    zetas = sorted({row["zeta"] for row in rows})
    colours = plt.cm.plasma(np.linspace(0, 0.85, len(zetas)))
    for zeta, colour in zip(zetas, colours):
        n, mean, std = (np.array([row[key] for row in rows if row["zeta"] == zeta])
                        for key in ("n_points", "mean", "std"))
        ax.plot(n, mean, marker="o", markersize=3, color=colour, label=f"$\\zeta$ = {zeta:g}")
        ax.fill_between(n, mean - std, mean + std, color=colour, alpha=0.25, linewidth=0)
    ax.axhline(population, color="black", linestyle="--", linewidth=1, label=f"population IsoScore = {population:.4f}")
    ax.axhline(shrink_score, color="grey", linestyle=":", linewidth=1,
               label=f"IsoScore($\\Sigma_S$) = {shrink_score:.4f}")
    ax.set_xscale("log")
    ax.set_ylim(0, 1)
    ax.set_xlabel("number of points |X|")
    ax.set_ylabel("IsoScore*(X, $\\zeta$, $\\Sigma_S$)")
    ax.set_title(f"Samples of N(0, diag(10, 6, 4, 4, 1, ..., 1)): mean $\\pm$ std over {repeats} draws", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    save_png(fig, path)


def main(argv=None, sizes=SIZES, dim=768, shrink_points=75_000) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for figure2.png and figure2.csv")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="independent draws per sample size")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows, population, shrink_score = run(sizes, ZETAS, args.repeats, args.seed, dim, shrink_points)
    flat = [{**row, "mean": f"{row['mean']:.6f}", "std": f"{row['std']:.6f}"} for row in rows]
    atomic_write_text(args.out / "figure2.csv", csv_text(flat, ("zeta", "n_points", "mean", "std"), line_end="\r\n"))
    plot(rows, population, shrink_score, args.out / "figure2.png", args.repeats)
    print(f"population IsoScore of diag(10, 6, 4, 4, 1, ..., 1): {population:.4f}")
    print(f"IsoScore of Sigma_S ({shrink_points} points): {shrink_score:.4f}")
    print("mean IsoScore*(X, zeta, Sigma_S):")
    mean = {(row["zeta"], row["n_points"]): row["mean"] for row in rows}
    print("n_points " + " ".join(f"zeta={zeta:<4g}" for zeta in ZETAS))
    print("\n".join(f"{n:>8} " + " ".join(f"{mean[zeta, n]:>9.4f}" for zeta in ZETAS) for n in sorted({*sizes})))
    return rows


if __name__ == "__main__":
    main()
