"""AdamW (fused, no weight decay on biases and norms) with linear warmup, then linear decay or a constant rate.

>>> from types import SimpleNamespace
>>> cfg = SimpleNamespace(weight_decay=0.01, lr=1e-3, adam_eps=1e-8, warmup_ratio=0.5, schedule="linear")
>>> optimizer, scheduler = build_optimizer(torch.nn.Linear(2, 2), cfg, total_steps=4)
>>> [round(scheduler.lr_lambdas[0](step), 3) for step in range(5)]
[0.333, 0.667, 1.0, 0.5, 0.0]
"""
from __future__ import annotations

import torch

NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")


def build_optimizer(model: torch.nn.Module, cfg, total_steps: int):
    """(AdamW over the trainable parameters, its LambdaLR schedule over ``total_steps``) from ``cfg.optim``."""
    decay, plain = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (plain if name.endswith(NO_DECAY) else decay).append(parameter)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": plain, "weight_decay": 0.0}], lr=cfg.lr, eps=cfg.adam_eps, fused=True)
    warmup = int(cfg.warmup_ratio * total_steps)

    def linear(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if cfg.schedule == "constant":
            return 1.0
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, linear)
