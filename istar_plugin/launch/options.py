"""Where and how grid cells run: ``launcher=inline|local|slurm``, SLURM profiles (``slurm=PROFILE``,
``slurm.FIELD=VALUE``), ``local.FIELD=VALUE`` and ``grid_dir=DIR``, taken out of a command line by ``parse``.

>>> options, rest = parse(["recipe=sst2", "slurm=local", "slurm.time_min=30", "seed=1,2"])
>>> options.launcher, options.slurm.partition, options.slurm.time_min, rest
('slurm', 'debug', 30, ['recipe=sst2', 'seed=1,2'])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..config.recipes import available, find_yaml, search_dirs
from ..errors import ConfigError
from ..storage.user_paths import expand_home

LAUNCHERS = ("inline", "local", "slurm")
PROFILES_ENV = "ISTAR_SLURM_PROFILES"


class LaunchError(ConfigError):
    """A bad launcher, profile or option; the message names the value and the choices."""


def _at_least(owner: str, name: str, value: Any, minimum: float) -> None:
    if value is not None and value < minimum:
        raise LaunchError(f"{owner}.{name} must be >= {minimum}, got {value!r}")


@dataclass
class SlurmProfile:
    """A cluster's sbatch settings for one kind of cell; every cell of a grid gets the same resources."""

    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: Optional[int] = None  # processes per node; default: one per GPU, or 1 without GPUs
    cpus_per_task: int = 1
    mem: Optional[str] = None  # per node, sbatch syntax ("32G"); None: the cluster's default
    time_min: int = 60
    array_parallelism: int = 16  # cells of one array running at once
    max_array_size: int = 1000  # the cluster's MaxArraySize - 1; bigger grids go out as several arrays
    max_requeues: int = 3  # requeues after a time-out (submitit's max_num_timeout); preemptions always requeue
    signal_delay_s: int = 120  # USR2 this long before the time limit: the cell is requeued, then resumes
    setup: list[str] = field(default_factory=list)  # shell lines before srun (module loads, conda activate)
    additional_parameters: dict[str, Any] = field(default_factory=dict)  # any other sbatch option

    def __post_init__(self) -> None:
        for name, minimum in [("nodes", 1), ("gpus_per_node", 0), ("tasks_per_node", 1), ("cpus_per_task", 1),
                              ("time_min", 1), ("array_parallelism", 1), ("max_array_size", 1),
                              ("max_requeues", 0), ("signal_delay_s", 0)]:
            _at_least("slurm", name, getattr(self, name), minimum)

    @property
    def tasks(self) -> int:
        return self.tasks_per_node or max(1, self.gpus_per_node)

    def executor_parameters(self, job_name: str) -> dict[str, Any]:
        """Keyword arguments for ``submitit.SlurmExecutor.update_parameters`` (the unset ones left out)."""
        parameters = {"job_name": job_name, "nodes": self.nodes, "ntasks_per_node": self.tasks,
                      "cpus_per_task": self.cpus_per_task, "time": self.time_min, "signal_delay_s": self.signal_delay_s,
                      "array_parallelism": self.array_parallelism, "partition": self.partition,
                      "account": self.account, "qos": self.qos, "constraint": self.constraint, "mem": self.mem,
                      "gpus_per_node": self.gpus_per_node or None, "setup": list(self.setup) or None,
                      "additional_parameters": dict(self.additional_parameters) or None}
        return {key: value for key, value in parameters.items() if value is not None}


@dataclass
class LocalOptions:
    """submitit's local executor: cells run as processes of this machine, at most ``parallelism`` at a time."""

    parallelism: int = 1
    tasks_per_node: int = 1  # processes per cell (torch.distributed on one machine)
    gpus_per_node: int = 0
    timeout_min: float = 24 * 60
    signal_delay_s: int = 60
    max_requeues: int = 3

    def __post_init__(self) -> None:
        for name, minimum in [("parallelism", 1), ("tasks_per_node", 1), ("gpus_per_node", 0),
                              ("timeout_min", 0.1), ("signal_delay_s", 0), ("max_requeues", 0)]:
            _at_least("local", name, getattr(self, name), minimum)

    def executor_parameters(self) -> dict[str, Any]:
        """Keyword arguments for ``submitit.LocalExecutor.update_parameters``."""
        return {"timeout_min": self.timeout_min, "signal_delay_s": self.signal_delay_s,
                "tasks_per_node": self.tasks_per_node, "gpus_per_node": self.gpus_per_node}


@dataclass
class LaunchOptions:
    launcher: str = "local"
    grid_dir: Optional[Path] = None
    profile: Optional[str] = None  # the SLURM profile's name, for the manifest
    slurm: Optional[SlurmProfile] = None
    local: LocalOptions = field(default_factory=LocalOptions)
    keys: dict[str, str] = field(default_factory=dict)  # the caller's own keys (istar-tune's workers=, search_dir=)


def profile_dirs() -> list[Path]:
    """Where ``slurm=NAME`` is looked up: ``$ISTAR_SLURM_PROFILES``, the source tree, the install prefix."""
    return search_dirs(PROFILES_ENV, "slurm", "profiles")


def available_profiles() -> list[str]:
    return available(dirs=profile_dirs())


def _typed(cls: type, *updates: Any, where: str) -> Any:
    """``cls`` built from YAML/dotlist ``updates``; an unknown field or a bad type is a ``LaunchError``."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls), *updates)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or getattr(error, "key", "?")
        fields = ", ".join(cls.__dataclass_fields__)
        raise LaunchError(f"{where}: bad field {key!r} ({error.msg.splitlines()[0]}); fields: {fields}") from None
    return cls(**OmegaConf.to_container(merged))


def load_profile(name: str, overrides: Sequence[str] = ()) -> SlurmProfile:
    """A SLURM profile from its YAML file, with ``FIELD=VALUE`` overrides."""
    path = find_yaml(name, dirs=profile_dirs())
    if path is None:
        raise LaunchError(f"unknown SLURM profile {name!r}; available: {', '.join(available_profiles()) or '(none)'}")
    return _typed(SlurmProfile, OmegaConf.load(path), OmegaConf.from_dotlist(list(overrides)),
                  where=f"SLURM profile {path}")


def parse(arguments: Sequence[str], keys: Sequence[str] = ()) -> tuple[LaunchOptions, list[str]]:
    """The launch options (the caller's own ``keys`` in ``options.keys``) and the rest of ``arguments``."""
    named, rest, taken = {}, [], {}
    dotted: dict[str, list[str]] = {"slurm": [], "local": []}
    for argument in arguments:
        key, sep, value = argument.partition("=")
        if sep and key in keys:
            taken[key] = value
        elif key in ("launcher", "slurm", "grid_dir"):
            named[key] = value
        elif key.partition(".")[0] in dotted and "." in key:
            dotted[key.partition(".")[0]].append(argument.partition(".")[2])
        else:
            rest.append(argument)
    try:
        grid_dir = Path(expand_home(named["grid_dir"], "grid_dir=")) if "grid_dir" in named else None
    except ConfigError as error:
        raise LaunchError(str(error)) from None
    profile, slurm_overrides, local_overrides = named.get("slurm"), dotted["slurm"], dotted["local"]
    launcher = named.get("launcher") or ("slurm" if profile else "local")
    if launcher not in LAUNCHERS:
        raise LaunchError(f"launcher {launcher!r} unknown; choose one of: {', '.join(LAUNCHERS)}")
    if launcher == "slurm" and not profile:
        raise LaunchError("launcher=slurm needs slurm=PROFILE; "
                          f"profiles: {', '.join(available_profiles()) or '(none)'}")
    if launcher != "slurm" and (profile or slurm_overrides):
        raise LaunchError(f"slurm= and slurm.* options need launcher=slurm, not launcher={launcher}")
    if launcher != "local" and local_overrides:
        raise LaunchError(f"local.* options need launcher=local, not launcher={launcher}")
    slurm = load_profile(profile, slurm_overrides) if profile else None
    local = _typed(LocalOptions, OmegaConf.from_dotlist(local_overrides), where="local options")
    return LaunchOptions(launcher, grid_dir, profile, slurm, local, taken), rest
