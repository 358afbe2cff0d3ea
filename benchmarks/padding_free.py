"""Seconds per training step, padded against padding-free (``model.padding_free``), on real batches.

    python benchmarks/padding_free.py [--tasks sst2 rte mrpc] [--data-root ../shared/data] [--repeats 5]
                                      [--model minilm]

For each task, at its recipe's settings (``recipes/TASK.yaml``: ``data.max_length``, micro-batches of
``batch_size / optim.grad_accum`` sequences, its criterion, here I-STAR): the training split read from
``DATA_ROOT/TASK`` and tokenised, seeded random micro-batches padded to their longest member (as the trainer
collates them), and one training step (forward, the criterion's loss, backward, AdamW) of the same model and weights
in fp32, once on the padded batch and once padding-free, on the same batches. The two run interleaved, so machine
noise hits both alike; the table gives each one's median seconds per step, their ratio and the share of the padded
batches' positions that are padding. Sigma_S is a fixed random covariance (its value does not change the cost).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from istar_plugin import config as config_module
from istar_plugin.config import compose
from istar_plugin.criterions import IStarCriterion
from istar_plugin.models.encoder import HFEncoder
from istar_plugin.registry import TASKS
from istar_plugin.training.batching import collate, epoch_order


def cpu_name() -> str:
    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    names = [line.partition(":")[2].strip() for line in lines if line.startswith("model name")]
    return f"{names[0]} x {len(names)}" if names else "unknown CPU"


def task_batches(task_name: str, data_root: Path, model: str, tokenizer, count: int):
    """(the recipe's config, ``count`` seeded random micro-batches of the task's training split, collated)."""
    cfg = compose([f"recipe={task_name}", f"model={model}", "data.source=files", f"data.dir={data_root / task_name}",
                   "criterion=istar", "precision=fp32"])
    task = TASKS.build(cfg.task, config_module.data_config(cfg))
    features = task.encode(task.load("train"), tokenizer)
    size = cfg.batch_size // cfg.optim.grad_accum
    order = epoch_order(len(features), seed=0, epoch=0, rank=0, world_size=1)
    batches = [collate([features[i] for i in order[start : start + size]], tokenizer.pad_token_id or 0,
                       torch.device("cpu")) for start in range(0, size * count, size)]
    return cfg, batches


def time_task(task_name: str, data_root: Path, model_preset: str, repeats: int) -> str:
    """The table row of one task: both modes' median seconds per step on the same ``repeats`` batches."""
    models = {}
    for padding_free in (False, True):
        torch.manual_seed(0)
        cfg = compose([f"recipe={task_name}", f"model={model_preset}", f"model.padding_free={padding_free}"])
        models[padding_free] = HFEncoder(config_module.model_config(cfg), "classification").train()
    models[True].load_state_dict(models[False].state_dict())
    cfg, batches = task_batches(task_name, data_root, model_preset, models[False].tokenizer, repeats + 1)
    criterion = IStarCriterion(config_module.criterion_config(cfg), "classification")
    width = models[False].hidden_size
    criterion.shrinkage_cov = torch.cov(torch.randn(4 * width, width).T)
    optimizers = {mode: torch.optim.AdamW(model.parameters(), lr=1e-6) for mode, model in models.items()}

    def step(padding_free: bool, batch) -> float:
        model, optimizer = models[padding_free], optimizers[padding_free]
        started = time.perf_counter()
        criterion(model, model(batch), batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    for padding_free in (False, True):  # warm-up
        step(padding_free, batches[0])
    times: dict[bool, list[float]] = {False: [], True: []}
    for batch in batches[1:]:
        for padding_free in (False, True):
            times[padding_free].append(step(padding_free, batch))
    padded, packed = statistics.median(times[False]), statistics.median(times[True])
    masks = [batch["attention_mask"] for batch in batches[1:]]
    share = 1 - sum(int(mask.sum()) for mask in masks) / sum(mask.numel() for mask in masks)
    return (f"| {task_name} | {cfg.batch_size // cfg.optim.grad_accum} x {cfg.data.max_length} | {share:.1%} | "
            f"{padded:.3f} | {packed:.3f} | {packed / padded:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["sst2", "rte", "mrpc"])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", default="minilm", help="a preset of recipes/model/")
    parser.add_argument("--repeats", type=int, default=5, help="steps timed per task and mode (distinct batches)")
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}; {torch.get_num_threads()} threads; load average "
          f"{' '.join(f'{load:.2f}' for load in os.getloadavg())}; torch {torch.__version__}; fp32; "
          f"{args.repeats} steps per task and mode, interleaved")
    print("| task | micro-batch x max_length | padding share | padded s/step | padding-free s/step | ratio |")
    print("|---|---|---|---|---|---|")
    for task_name in args.tasks:
        print(time_task(task_name, args.data_root, args.model, args.repeats))

if __name__ == "__main__":
    main()
