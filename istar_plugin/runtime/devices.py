"""The device a process runs on: ``device=auto``, ``cpu``, ``cuda[:N]`` or ``mps``, checked against this machine."""
from __future__ import annotations

import torch

from ..errors import ConfigError


def available_devices() -> list[str]:
    """The ``device=`` values this machine and torch build can run: auto, cpu, each CUDA GPU, mps where it is."""
    gpus = [f"cuda:{index}" for index in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ["auto", "cpu", *(["cuda"] if gpus else []), *gpus, *(["mps"] if torch.backends.mps.is_available() else [])]


def pick_device(requested: str, local_rank: int = 0) -> torch.device:
    """The device ``requested`` (``auto`` and ``cuda``: this process's GPU, ``cuda:LOCAL_RANK``, if any)."""
    if requested == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(f"cuda:{local_rank}" if requested == "cuda" else requested)
    if (missing := _why_missing(device)) is not None:
        named = f"device={requested!r}" + ("" if str(device) == requested else f" ({device}, by LOCAL_RANK)")
        raise ConfigError(f"{named} asked for, but {missing}; choose one of: {', '.join(available_devices())}")
    return device


def _why_missing(device: torch.device) -> str | None:
    if device.type == "cuda":
        if torch.version.cuda is None:
            return f"this torch build ({torch.__version__}) has no CUDA support"
        if not torch.cuda.is_available():
            return "CUDA finds no GPU here"
        if device.index >= (count := torch.cuda.device_count()):
            return f"this machine has {count} CUDA device{'s' if count != 1 else ''} (cuda:0 to cuda:{count - 1})"
    if device.type == "mps" and not torch.backends.mps.is_available():
        if not torch.backends.mps.is_built():
            return f"this torch build ({torch.__version__}) has no MPS support"
        return "MPS finds no Apple GPU here (macOS 12.3 or later on Apple silicon)"
    return None
