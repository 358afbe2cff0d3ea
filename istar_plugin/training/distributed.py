"""Process-group setup from the environment (torchrun, SLURM via submitit) and small collective helpers."""
from __future__ import annotations

import atexit
import datetime
import gc
import os
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from ..runtime.devices import pick_device

TIMEOUT_ENV = "ISTAR_DIST_TIMEOUT_S"


class DistInfo(NamedTuple):
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_from_env(requested_device: str = "auto") -> DistInfo:
    """Join the process group the environment describes (``WORLD_SIZE``, ``RANK``, ...); rank 0 of 1 without one."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = pick_device(requested_device, int(os.environ.get("LOCAL_RANK", "0")))
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        timeout = datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, "600")))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timeout)
        atexit.register(leave_process_group)
    return DistInfo(rank, world_size, device)


def leave_process_group() -> None:
    """Leave the process group, its worker threads ended while the interpreter is whole (run at exit)."""
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def gather_to_all(obj: Any, world_size: int) -> list[Any]:
    """Every rank's ``obj``, in rank order (a plain list of one element when not distributed)."""
    if world_size == 1:
        return [obj]
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def from_main(obj: Any, world_size: int) -> Any:
    """Rank 0's ``obj`` on every rank (``obj`` itself when not distributed)."""
    if world_size == 1:
        return obj
    shared = [obj]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]


def mean_over_ranks(values: torch.Tensor, world_size: int) -> torch.Tensor:
    """The element-wise mean of ``values`` over the ranks, on the device (no host sync)."""
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
