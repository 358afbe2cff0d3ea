r"""How hard the I-STAR penalty pulls on the trainable parameters, against the task loss, on one batch of a run's
training data: the gradient norms of ``1 - IsoScore*`` (zeta 0: the batch's own covariance) and of the task loss.

    python benchmarks/penalty_pull.py [--batch 8] [--csv FILE] [--setup "KEY=VALUE ..."]... [KEY=VALUE ...]

Each setup is a set of istar-run overrides (recipe, model, data, layers): the positional ones make one, and each
``--setup`` one more. Prints, per setup, the batch's IsoScore*, both gradient norms and their ratio: at lambda = 1
the penalty's share of the update is that ratio (before the optimizer's per-parameter scaling). ``--csv`` also
writes the table. MiniLM on SST-2 against SmolLM2 with LoRA on its middle layers (docs/decoders.md,
docs/results/penalty_pull.csv):

    python benchmarks/penalty_pull.py --csv docs/results/penalty_pull.csv \
        --setup "recipe=sst2 model=minilm data.source=files data.dir=../shared/data/sst2" \
        --setup "recipe=lm model=smollm2 data.text_from=sst2 data.dir=../shared/data/sst2 criterion.layers=8:22"
"""
from __future__ import annotations

import argparse
import shlex
import sys

import torch
from csv_table import add_csv_option, at_least_one, write_csv
from omegaconf import DictConfig
from startup import cpu_name

from istar_plugin.config import compose, data_config, model_config
from istar_plugin.criterions import task_loss
from istar_plugin.errors import run_command
from istar_plugin.isotropy import isoscore_star
from istar_plugin.models.encoder import padded_token_cloud
from istar_plugin.registry import MODELS, TASKS
from istar_plugin.runtime.batching import collate
from istar_plugin.runtime.rng import seed_everything

HEADER = ["model", "task", "layers", "examples", "trainable parameters", "batch IsoScore*", "|grad task loss|",
          "|grad (1 - IsoScore*)|", "ratio", "CPU"]


def gradient_norm(value: torch.Tensor, parameters: list[torch.Tensor]) -> float:
    grads = torch.autograd.grad(value, parameters, retain_graph=True, allow_unused=True)
    return torch.sqrt(sum((g.float() ** 2).sum() for g in grads if g is not None)).item()


def pull(cfg: DictConfig, batch: int) -> list[str]:
    """One composed setup's row of :data:`HEADER`, its numbers as printed."""
    task = TASKS.build(cfg.task, data_config(cfg))
    examples = task.load("train")[:batch]
    seed_everything(cfg.seed)  # the head's initialisation and dropout's draws: the same figures on every run
    model = MODELS.get(cfg.model.adapter).cls(model_config(cfg), task.kind, max(task.num_labels, 1))
    model.train()
    inputs = collate(task.encode(examples, model.tokenizer), model.tokenizer.pad_token_id, torch.device("cpu"))
    output = model(inputs)
    trainable = [p for p in model.parameters() if p.requires_grad]
    loss = task_loss(task.kind, output, inputs)
    score = isoscore_star([c.float() for c in padded_token_cloud(model, output, cfg.criterion.layers, False)],
                          None, 0.0)
    task_norm, penalty_norm = gradient_norm(loss, trainable), gradient_norm(1.0 - score, trainable)
    layers = list(cfg.criterion.layers or [])
    contiguous = layers == list(range(layers[0], layers[-1] + 1)) if layers else False
    return [cfg.model.name, cfg.task, f"{layers[0]}-{layers[-1]}" if contiguous else str(layers or "all"),
            str(len(examples)),
            f"{sum(p.numel() for p in trainable):,}", f"{score.item():.3g}", f"{task_norm:.4g}",
            f"{penalty_norm:.4g}", f"{penalty_norm / task_norm:.3g}", cpu_name()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=at_least_one, default=8, help="training examples in the batch (default 8)")
    parser.add_argument("--setup", action="append", default=[], type=shlex.split, metavar="OVERRIDES",
                        help="one more setup: istar-run overrides in one quoted argument (repeatable)")
    add_csv_option(parser)
    parser.add_argument("overrides", nargs="*", help="istar-run overrides (KEY=VALUE) of one setup")
    args = parser.parse_args()
    setups = ([args.overrides] if args.overrides or not args.setup else []) + args.setup

    def measure() -> int:
        configs = [compose(["criterion=istar", "precision=fp32", *overrides]) for overrides in setups]
        rows = []
        for cfg in configs:
            rows.append(pull(cfg, args.batch))
            print("   ".join(f"{name} {value}" for name, value in zip(HEADER, rows[-1])), flush=True)
        write_csv(args.csv, HEADER, rows)
        return 0

    return run_command("penalty_pull.py", measure)


if __name__ == "__main__":
    sys.exit(main())
