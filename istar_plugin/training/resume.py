"""Resuming a run: what it may change, whether a checkpoint may be continued, its rates and random streams."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

import torch

from ..config import ADDED_KEYS
from ..data.fingerprint import changed_splits
from ..errors import RunDirError
from ..storage.checkpoints import Checkpoints
from ..storage.results import read_results
from ..runtime.rng import seed_everything, set_rng_state

RESUMABLE_CHANGES = {"progress", "tensorboard", "log_every", "resume", "output_dir", "device", "eval_every",
                     "save_every", "max_steps", "keep_checkpoints", "optim.overflow_patience",
                     "data.sort_eval_by_length"}


def config_changes(saved: dict, current: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ, but those a resumed run may change and keys added since at their old value."""
    changed = []
    for key in sorted(set(saved) | set(current)):
        name = f"{prefix}{key}"
        if name in RESUMABLE_CHANGES or (key not in saved and name in ADDED_KEYS and current[key] == ADDED_KEYS[name]):
            continue
        old, new = saved.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += config_changes(old, new, f"{name}.")
        elif old != new:
            changed.append(name)
    return changed


def described_changes(saved: dict, current: dict) -> str:
    """:func:`config_changes` with each key's value then and now: ``batch_size 8 then, 4 now``."""
    def value(config: dict, name: str) -> Any:
        for key in name.split("."):
            config = config.get(key) if isinstance(config, dict) else None
        return config

    return "; ".join(f"{name} {value(saved, name)} then, {value(current, name)} now"
                     for name in config_changes(saved, current))


def resumable_state(output_dir: Path, checkpoints: Checkpoints, config: dict, fingerprint: dict
                    ) -> Optional[dict[str, Any]]:
    """The latest checkpoint's state when this run may continue it, or None; refused with other settings or data."""
    latest = checkpoints.latest()
    if latest is None:
        return None
    if not config["resume"]:
        raise RunDirError(f"{output_dir} already holds a run (checkpoint {latest.name}) and resume=false; "
                          "resume=true continues it, or choose another output_dir")
    state = checkpoints.load_latest(map_location="cpu")
    if changed := described_changes(state["config"], config):
        raise RunDirError(f"{output_dir} holds a checkpoint of a different run (changed: {changed}); "
                          "resume with the same settings or choose another output_dir")
    if changed_data := changed_splits(state.get("data", {}), fingerprint):
        raise RunDirError(f"{output_dir} holds a checkpoint of a run on other data (changed: "
                          f"{'; '.join(changed_data)}); resume with the data it started on or choose another "
                          "output_dir")
    return state


def rates_at_restored_step(optimizer: torch.optim.Optimizer, scheduler) -> None:
    """Set each group's rate to this run's schedule at the restored step (max_steps may have grown since)."""
    for group, base_lr, rate in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base_lr * rate(scheduler.last_epoch)


def restore_random_streams(state: dict, rank: int, world_size: int, batches_per_epoch: int, seed: int,
                           output_dir: Path) -> None:
    """This rank's saved RNG state; another world size's checkpoint resumes only at an epoch boundary, reseeded."""
    saved_world_size = len(state["rng"])
    if saved_world_size == world_size:
        set_rng_state(state["rng"][rank])
    elif 0 < state["batches_done"] < batches_per_epoch:
        raise RunDirError(f"{output_dir}: the latest checkpoint (step {state['step']}) was taken mid-epoch by "
                          f"{saved_world_size} rank(s); resume it on {saved_world_size}, not {world_size} (each rank's "
                          "share of the epoch depends on the number of ranks), or from an epoch-end checkpoint")
    else:  # an epoch boundary: the next epoch's order is split afresh; only the random streams must be new
        warnings.warn(f"resuming a {saved_world_size}-rank checkpoint on {world_size} rank(s): random "
                      "streams reseeded from (seed, step, rank); not bitwise the run an unchanged world size gives",
                      stacklevel=2)
        seed_everything(seed + 1_000_003 * rank + 7919 * state["step"])


def holds_weights(run_dir: Path, checkpoints: Checkpoints) -> bool:
    """``run_dir`` holds the model's trained weights: a checkpoint to resume, or a finished run's results."""
    if checkpoints.latest() is not None:
        return True
    record = read_results(run_dir, strict=False)  # a malformed one: refused by finished_results, one line
    return record is not None and record.finished
