"""Process-group setup from the environment (torchrun, SLURM via submitit) and small collective helpers.

Single-process runs need nothing: ``init_from_env`` returns rank 0 of 1 without touching torch.distributed.

>>> info = init_from_env("cpu")
>>> (info.rank, info.world_size, str(info.device))
(0, 1, 'cpu')
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..errors import ConfigError

TIMEOUT_ENV = "ISTAR_DIST_TIMEOUT_S"


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def available_devices() -> list[str]:
    """The ``device=`` values this machine and torch build can run: auto, cpu, each CUDA GPU, mps where it is.

    >>> available_devices()[:2]
    ['auto', 'cpu']
    """
    gpus = [f"cuda:{index}" for index in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ["auto", "cpu", *(["cuda"] if gpus else []), *gpus, *(["mps"] if torch.backends.mps.is_available() else [])]


def pick_device(requested: str, local_rank: int = 0) -> torch.device:
    """``auto``: this process's GPU when there is one, else the CPU; ``cuda`` without an index: this process's GPU
    (``cuda:LOCAL_RANK``, so that ranks on one node do not all land on GPU 0). A device this machine or torch build
    does not have is refused (:class:`ConfigError`, naming the ones it has).

    >>> pick_device("cpu", local_rank=3)
    device(type='cpu')
    """
    if requested == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(f"cuda:{local_rank}" if requested == "cuda" else requested)
    missing = _why_missing(device)
    if missing is not None:
        named = f"device={requested!r}" + ("" if str(device) == requested else f" ({device}, by LOCAL_RANK)")
        raise ConfigError(f"{named} asked for, but {missing}; choose one of: {', '.join(available_devices())}")
    return device


def _why_missing(device: torch.device) -> str | None:
    """Why this machine cannot run on ``device``; None when it can."""
    if device.type == "cuda":
        if torch.version.cuda is None:
            return f"this torch build ({torch.__version__}) has no CUDA support"
        if not torch.cuda.is_available():
            return "CUDA finds no GPU here"
        count = torch.cuda.device_count()
        if device.index >= count:
            return f"this machine has {count} CUDA device{'s' if count != 1 else ''} (cuda:0 to cuda:{count - 1})"
    if device.type == "mps" and not torch.backends.mps.is_available():
        if not torch.backends.mps.is_built():
            return f"this torch build ({torch.__version__}) has no MPS support"
        return "MPS finds no Apple GPU here (macOS 12.3 or later on Apple silicon)"
    return None


def init_from_env(requested_device: str = "auto") -> DistInfo:
    """Join the process group described by ``WORLD_SIZE``/``RANK``/``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT``.

    NCCL on GPUs, gloo on CPUs; collectives time out after ``$ISTAR_DIST_TIMEOUT_S`` seconds (default 600)
    so a rank that died cannot hang the others forever.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(requested_device, local_rank)
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        timeout = datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, "600")))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timeout)
    return DistInfo(rank, world_size, local_rank, device)


def gather_to_all(obj: Any, world_size: int) -> list[Any]:
    """Every rank's ``obj``, in rank order (a plain list of one element when not distributed)."""
    if world_size == 1:
        return [obj]
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def mean_over_ranks(values: torch.Tensor, world_size: int) -> torch.Tensor:
    """The element-wise mean of ``values`` over the ranks (every rank passes the same shape); ``values`` when not
    distributed. Stays on the device: no host sync."""
    if world_size == 1:
        return values
    totals = values.clone()
    dist.all_reduce(totals)
    return totals / world_size


def barrier(world_size: int) -> None:
    if world_size > 1:
        dist.barrier()


def wrap_model(model: torch.nn.Module, world_size: int, device: torch.device) -> torch.nn.Module:
    """``model`` itself on one rank, else wrapped in DistributedDataParallel (on ``device`` for a GPU)."""
    if world_size == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)
