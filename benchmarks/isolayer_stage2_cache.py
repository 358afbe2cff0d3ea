"""The Isotropy Layer's stage 2 with the frozen encoder's outputs cached against computed at every step.

    python benchmarks/isolayer_stage2_cache.py [--rounds 2] [--samples 1600] [--epochs 3] [--threads 2] [--patience 1]
        [--spilled] [--csv FILE]

The job is a stage-2 cell of ``recipes/grids/isolayer_minilm.yaml`` on RTE (``../shared/data/rte`` or
ISTAR_SHARED_DATA): the packaged MiniLM, ``--samples`` training pairs of which 30% validate (early stopping,
``--patience`` 1, 0 for none), 400 dev pairs, 64 tokens, batch 16, ``--epochs`` epochs, lr 1e-3. Its stage 1 is a short
cross-entropy run (20 steps: stage 2's cost does not depend on how good stage 1 is). The two variants differ in
``model.frozen_dropout`` alone: false (the default: outputs cached, no dropout in the frozen encoder) and true
(dropout at every step, no cache: the behaviour before the cache). Each runs ``--rounds`` times in this process,
alternating which goes first; the script prints each one's median cell wall time (construction to results) and
seconds per optimizer step, their ratios (target: the cell at least 10x faster), and both runs' accuracy.
``--spilled`` adds a third variant, the cache moved to its file on disk from the first vector (as a cache beyond
``frozen_backbone.MEMORY_LIMIT`` is), and its cost over the in-memory cache. ``--csv`` also writes a row per variant
(medians, accuracy of each round, ratios to the cached variant).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from csv_table import add_csv_option, write_csv

from istar_plugin.config import compose
from istar_plugin.models import frozen_backbone
from istar_plugin.training.trainer import Trainer

DATA = Path(os.environ.get("ISTAR_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def overrides(args, output_dir: Path, *extra: str) -> list[str]:
    return ["recipe=rte", "model=minilm", "data.source=files", f"data.dir={DATA / 'rte'}", "data.validation_split=0.3",
            f"data.max_train_samples={args.samples}", "data.max_eval_samples=400", "data.max_length=64",
            "batch_size=16", "eval_batch_size=64", "optim.grad_accum=1", f"optim.epochs={args.epochs}",
            f"patience={args.patience or 'null'}",
            "eval_before_training=false", "progress=false", "tensorboard=false", f"output_dir={output_dir}", *extra]


def stage_two(args, stage_one: Path, output_dir: Path, frozen_dropout: bool) -> dict:
    started = time.perf_counter()
    results = Trainer(compose(overrides(args, output_dir, "criterion=isolayer", f"init_from={stage_one}",
                                        "optim.lr=1e-3", "optim.weight_decay=0.0", "optim.warmup_ratio=0.0",
                                        f"model.frozen_dropout={str(frozen_dropout).lower()}"))).fit()
    wall = time.perf_counter() - started
    steps = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    per_step = [record["train/seconds_per_step"] for record in steps if "train/seconds_per_step" in record]
    return {"wall": wall, "per_step": statistics.mean(per_step), "accuracy": results["accuracy"],
            "steps": results["step"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=1600)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--patience", type=int, default=1, help="early stopping's patience; 0: none")
    parser.add_argument("--spilled", action="store_true", help="also the cache on disk from its first vector")
    add_csv_option(parser)
    args = parser.parse_args()
    in_memory = frozen_backbone.MEMORY_LIMIT
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        stage_one = root / "stage1"
        Trainer(compose(overrides(args, stage_one, "criterion=cross_entropy", "optim.lr=1e-4", "max_steps=20"))).fit()
        variants = ("cached", "uncached", *(("spilled",) if args.spilled else ()))
        runs: dict[str, list[dict]] = {name: [] for name in variants}
        for round_ in range(args.rounds):
            for name in variants if round_ % 2 == 0 else variants[::-1]:
                frozen_backbone.MEMORY_LIMIT = 0 if name == "spilled" else in_memory
                runs[name].append(stage_two(args, stage_one, root / f"{name}{round_}",
                                            frozen_dropout=name == "uncached"))
    median = {name: {key: statistics.median(run[key] for run in done) for key in ("wall", "per_step")}
              for name, done in runs.items()}
    print(f"Isotropy Layer stage 2 on RTE ({args.samples} training pairs, 30% validate; {args.epochs} epochs; "
          f"{runs['cached'][0]['steps']} steps), {args.rounds} rounds, {args.threads} threads (medians):")
    for name in ("uncached", *variants[:1], *variants[2:]):
        print(f"  {name:9s} cell {median[name]['wall']:7.1f} s   {median[name]['per_step']:.4f} s/step   "
              f"accuracy {[round(100 * run['accuracy'], 2) for run in runs[name]]}")
    print(f"  uncached / cached: cell {median['uncached']['wall'] / median['cached']['wall']:.1f}x, "
          f"step {median['uncached']['per_step'] / median['cached']['per_step']:.1f}x")
    if args.spilled:
        print(f"  spilled / cached (in memory): cell {median['spilled']['wall'] / median['cached']['wall']:.3f}, "
              f"step {median['spilled']['per_step'] / median['cached']['per_step']:.3f}")
    write_csv(args.csv, ["variant", "median cell s", "median s/step", "accuracy x100 per round", "cell x cached",
                         "step x cached"],
              [[name, f"{median[name]['wall']:.1f}", f"{median[name]['per_step']:.4f}",
                " ".join(f"{100 * run['accuracy']:.2f}" for run in runs[name]),
                f"{median[name]['wall'] / median['cached']['wall']:.3f}",
                f"{median[name]['per_step'] / median['cached']['per_step']:.3f}"]
               for name in ("uncached", *variants[:1], *variants[2:])])


if __name__ == "__main__":
    main()
