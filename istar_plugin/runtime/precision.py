"""Mixed precision: which one a run uses on its device (``auto``: bf16 where the device computes it natively, else fp16
on a GPU and fp32 on a CPU), and the autocast context of its forward passes.

>>> import torch
>>> choose_precision("auto", torch.device("cpu")) == ("bf16" if native_bf16(torch.device("cpu")) else "fp32")
True
>>> with autocast("bf16", torch.device("cpu")):
...     (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
torch.bfloat16
"""
from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

from ..errors import ConfigError


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 matrix products in hardware (CUDA with bf16; AVX512-BF16 or AMX on a CPU)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return any(torch.cpu.get_capabilities().get(flag, False) for flag in ("avx512_bf16", "amx_bf16", "amx_tile"))
    return False


def choose_precision(chosen: str, device: torch.device) -> str:
    """The precision a run uses: ``chosen`` (``auto`` or one of :data:`~istar_plugin.config.PRECISIONS`) on a device."""
    if chosen == "auto":
        return "bf16" if native_bf16(device) else "fp16" if device.type == "cuda" else "fp32"
    if chosen == "fp16" and device.type == "cpu":
        raise ConfigError("precision=fp16 needs a GPU; use fp32 or bf16 on CPU")
    if chosen == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"precision=bf16: this GPU ({torch.cuda.get_device_name(device)}) computes no bf16; "
                          "choose one of: auto, fp16, fp32")
    return chosen


def precision_line(chosen: str, used: str, device: torch.device) -> str:
    """What a run says about its precision at the start."""
    if chosen != "auto":
        return f"precision {used}"
    why = f"this {device.type} computes bf16 natively" if used == "bf16" else f"no native bf16 on this {device.type}"
    return f"precision {used} (auto: {why}{'; precision=fp32 for full precision' if used != 'fp32' else ''})"


def autocast(precision: str, device: torch.device) -> ContextManager:
    """The context of a forward pass in ``precision``: no autocast for fp32, else autocast to bf16 or fp16."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
