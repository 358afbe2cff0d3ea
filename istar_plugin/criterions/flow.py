"""Flow calibration (Li et al.'s BERT-flow): a Glow flow before the task head; the loss adds ``beta * NLL(h) / d``."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..errors import ConfigError
from ..registry import CRITERIONS
from ..settings import check_fields, setting
from .task import CriterionOutput, CrossEntropyCriterion, task_loss

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class FlowConfig:
    beta: float = setting(1.0, help="weight of the flow's NLL (nats per dimension)", low=0,
                          refused="{key} must be a non-negative number, got {value}")
    depth: int = setting(2, help="flow steps", low=1, refused="{key} must be at least 1 flow step, got {value}")
    width: int = setting(256, help="hidden units of each coupling network", low=1,
                         refused="{key} must be at least 1 hidden unit, got {value}")

    def __post_init__(self) -> None:
        check_fields(self, "criterion.")


def flow_memory_bytes(dim: int, depth: int, width: int) -> int:
    """The bytes a training flow on ``dim``-dimensional vectors takes: parameters, gradients, AdamW state, buffers."""
    def coupling(kept: int) -> int:
        return (kept + 1) * width + (width + 1) * width + (width + 1) * 2 * (dim - kept)

    even_steps, odd_steps = (depth + 1) // 2, depth // 2  # the even steps keep the first dim // 2 dimensions
    parameters = depth * (3 * dim + 2 * dim * dim) + even_steps * coupling(dim // 2) + odd_steps * coupling(
        dim - dim // 2)
    return 16 * parameters + 4 * depth * (dim * dim + dim)  # a parameter: float32 weight, gradient, AdamW's moments


CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_MEMBERSHIP = Path("/proc/self/cgroup")  # the cgroups this process is in, one line per hierarchy
CGROUP_LIMITS = {"": ("", "memory.max"), "memory": ("memory", "memory.limit_in_bytes")}  # v2, v1: (mount, file)


def physical_memory_bytes() -> Optional[int]:
    """This machine's physical memory, None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no os.sysconf (Windows) or no such name
        return None


def cgroup_memory_bytes(root: Path = CGROUP_ROOT, membership: Path = CGROUP_MEMBERSHIP
                        ) -> Optional[tuple[int, Path]]:
    """The smallest memory limit among the cgroups this process runs in (its own, as ``membership`` names it, and
    each above it: a SLURM job's, a container's) and the file that sets it; None without one: no such file, ``max``
    (v2) or v1's page-rounded 2**63 - 1."""
    try:
        lines = membership.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        lines = []
    places = {("", Path("/")), ("memory", Path("/"))}  # a container's own cgroup is the root of its view
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]  # hierarchy:controllers:/path
        if path.startswith("/"):
            for controller in {"", "memory"} & set(controllers.split(",")):
                places |= {(controller, folder) for folder in (Path(path), *Path(path).parents)}
    limits = []
    for controller, folder in places:
        mount, name = CGROUP_LIMITS[controller]
        file = root / mount / folder.relative_to("/") / name
        try:
            text = file.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isdigit() and int(text) < 2 ** 62:
            limits.append((int(text), file))
    return min(limits, default=None)


def memory_limit() -> Optional[tuple[int, str]]:
    """The memory this process may use and what sets it: the machine's physical memory or, when smaller, its
    cgroup's limit; None where neither is known."""
    limits = []
    if (physical := physical_memory_bytes()) is not None:
        limits.append((physical, f"this machine's {decimal_size(physical)} of memory"))
    if (cgroup := cgroup_memory_bytes(CGROUP_ROOT)) is not None:
        size, path = cgroup
        limits.append((size, f"the {decimal_size(size)} of memory this process's cgroup may use ({path})"))
    return min(limits, default=None)


def decimal_size(count: float) -> str:
    """A byte count in decimal units."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if count < 1000:
            return f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} PB"


@CRITERIONS.register("flow", FlowConfig)
class FlowCriterion(CrossEntropyCriterion):
    """Inserts a :class:`~.modules.Glow` flow before the head; loss = task loss + ``beta`` * NLL(h) / d."""

    @classmethod
    def check_hidden_size(cls, cfg: FlowConfig, hidden_size: int) -> None:
        needed, limit = flow_memory_bytes(hidden_size, cfg.depth, cfg.width), memory_limit()
        if limit is not None and needed > limit[0]:
            raise ValueError(f"criterion.width={cfg.width}, criterion.depth={cfg.depth}: the flow on hidden size "
                             f"{hidden_size} needs about {decimal_size(needed)} for its parameters, their gradients "
                             f"and AdamW's state, more than {limit[1]}; lower criterion.width (default 256) or "
                             "criterion.depth (default 2)")

    @classmethod
    def check_setup(cls, cfg: FlowConfig, adapter: type, kind: str) -> None:
        if not callable(getattr(adapter, "insert_before_head", None)):
            raise ValueError(f"criterion=flow needs a model adapter that can insert a module before the head "
                             f"(insert_before_head()); {adapter.__name__} cannot")
        if kind not in ("classification", "regression"):
            raise ValueError(f"criterion=flow acts on one representation per example; task kind {kind!r} has none "
                             "(choose a classification or regression task)")

    def adapt(self, model) -> None:
        try:  # compose checked it when the model's config was on this machine; a hub model's is known only now
            self.check_hidden_size(self.cfg, model.hidden_size)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        from .modules import Glow

        self.flow = Glow(model.hidden_size, self.cfg.depth, self.cfg.width)
        model.insert_before_head("flow", self.flow)

    def __call__(self, model, output, batch: dict[str, Tensor]) -> CriterionOutput:
        import torch

        base = task_loss(self.kind, output, batch)
        h = output.representation.detach().float()
        with torch.autocast(device_type=h.device.type, enabled=False):
            nll = self.flow.nll(h).mean() / h.shape[1]
        loss = base + self.cfg.beta * nll
        return CriterionOutput(loss, {"task_loss": base.detach(), "penalty": (loss - base).detach(),
                                      "nll": nll.detach()})
