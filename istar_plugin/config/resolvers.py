"""The interpolations a run config may use besides OmegaConf's own: ``${cell:LABEL,VALUE,...}`` (a sibling grid
cell's run directory) and ``${for_task:TASK,VALUE,...}`` (one value per task).

>>> register_resolvers()
>>> OmegaConf.create({"task": "rte", "zeta": "${for_task:rte,0.8,mrpc,0.6}"}).zeta
0.8
>>> OmegaConf.create({"output_dir": "/g/recipe=rte,criterion=isolayer", "x": "${cell:criterion,cross_entropy}"}).x
'/g/recipe=rte,criterion=cross_entropy'
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ..errors import ConfigError


def sibling_cell(*changes, _root_) -> str:
    """``${cell:LABEL,VALUE,...}``: the run directory of the sibling grid cell with each LABEL set to VALUE."""
    run_dir = Path(str(_root_.output_dir))
    parts = [part.partition("=") for part in run_dir.name.split(",")]
    if not all(sep for _, sep, _ in parts):
        raise ConfigError(f"${{cell:...}} names a sibling grid cell, but output_dir {run_dir} is not a grid cell's "
                          "directory (label=value,...)")
    named = {label: value for label, _, value in parts}
    labels, values = changes[::2], changes[1::2]
    if len(labels) != len(values) or not set(map(str, labels)) <= set(named):
        raise ConfigError(f"${{cell:{','.join(map(str, changes))}}}: expected LABEL,VALUE pairs with LABEL one of "
                          f"this cell's ({', '.join(named)})")
    named.update({str(label): str(value) for label, value in zip(labels, values)})
    return str(run_dir.parent / ",".join(f"{label}={value}" for label, value in named.items()))


def value_for_task(*pairs, _root_) -> Any:
    """``${for_task:TASK,VALUE,...}``: the VALUE paired with this run's ``task``."""
    tasks, values = [str(task) for task in pairs[::2]], pairs[1::2]
    if not tasks or len(tasks) != len(values):
        raise ConfigError(f"${{for_task:{','.join(map(str, pairs))}}}: expected TASK,VALUE pairs")
    if str(_root_.task) not in tasks:
        raise ConfigError(f"${{for_task:...}} has no value for task {_root_.task!r}; it gives: {', '.join(tasks)}")
    return values[tasks.index(str(_root_.task))]


def register_resolvers() -> None:
    """Make ``${cell:...}`` and ``${for_task:...}`` resolvable; registering again does nothing."""
    if not OmegaConf.has_resolver("cell"):
        OmegaConf.register_resolver("cell", sibling_cell, annotation_validation="off")
    if not OmegaConf.has_resolver("for_task"):
        OmegaConf.register_resolver("for_task", value_for_task)
