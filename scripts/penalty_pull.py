r"""How hard the I-STAR penalty pulls on the trainable parameters, against the task loss, on one batch of a run's
training data: the gradient norms of ``1 - IsoScore*`` (zeta 0: the batch's own covariance) and of the task loss.

    python scripts/penalty_pull.py [--batch 8] KEY=VALUE ...    # any istar-run overrides: recipe, model, data, layers

Prints the batch's IsoScore*, both gradient norms and their ratio: at lambda = 1 the penalty's share of the update
is that ratio (before the optimizer's per-parameter scaling). For example, MiniLM on SST-2 against SmolLM2 with LoRA
on its middle layers (docs/decoders.md):

    python scripts/penalty_pull.py recipe=sst2 model=minilm data.source=files data.dir=../shared/data/sst2
    python scripts/penalty_pull.py recipe=lm model=smollm2 data.text_from=sst2 data.dir=../shared/data/sst2 \
        criterion.layers=8:22
"""
from __future__ import annotations

import argparse

import torch

from istar_plugin.config import compose, data_config, model_config
from istar_plugin.criterions import task_loss
from istar_plugin.isotropy import isoscore_star
from istar_plugin.models.encoder import padded_token_cloud
from istar_plugin.registry import MODELS, TASKS
from istar_plugin.runtime.batching import collate


def gradient_norm(value: torch.Tensor, parameters: list[torch.Tensor]) -> float:
    grads = torch.autograd.grad(value, parameters, retain_graph=True, allow_unused=True)
    return torch.sqrt(sum((g.float() ** 2).sum() for g in grads if g is not None)).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8, help="training examples in the batch (default 8)")
    parser.add_argument("overrides", nargs="*", help="istar-run overrides (KEY=VALUE)")
    args = parser.parse_args()
    cfg = compose(["criterion=istar", "precision=fp32", *args.overrides])
    task = TASKS.build(cfg.task, data_config(cfg))
    examples = task.load("train")[: args.batch]
    model = MODELS.get(cfg.model.adapter).cls(model_config(cfg), task.kind, max(task.num_labels, 1))
    model.train()
    batch = collate(task.encode(examples, model.tokenizer), model.tokenizer.pad_token_id, torch.device("cpu"))
    output = model(batch)
    trainable = [p for p in model.parameters() if p.requires_grad]
    loss = task_loss(task.kind, output, batch)
    score = isoscore_star([c.float() for c in padded_token_cloud(model, output, cfg.criterion.layers, False)],
                          None, 0.0)
    task_norm, penalty_norm = gradient_norm(loss, trainable), gradient_norm(1.0 - score, trainable)
    layers = cfg.criterion.layers or "all"
    print(f"{cfg.task} with {cfg.model.name}, layers {layers}, {len(examples)} examples, "
          f"{sum(p.numel() for p in trainable):,} trainable parameters")
    print(f"batch IsoScore* {score.item():.3g}   |grad task loss| {task_norm:.4g}   "
          f"|grad (1 - IsoScore*)| {penalty_norm:.4g}   ratio {penalty_norm / task_norm:.3g}")


if __name__ == "__main__":
    main()
