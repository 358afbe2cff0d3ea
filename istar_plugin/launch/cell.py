"""One grid cell's run directory (its frozen config ``cell.yaml``, ``attempts.jsonl``) and the checkpointable callable
that runs it under any submitit executor.

>>> import tempfile
>>> from istar_plugin.config import compose
>>> run_dir = Path(tempfile.mkdtemp())
>>> cfg = compose(["recipe=movie_snippets", f"output_dir={run_dir}"])
>>> _ = write_snapshot(run_dir, cfg)
>>> load_snapshot(run_dir) == cfg, differences(load_snapshot(run_dir), cfg), is_finished(run_dir, cfg)
(True, [], False)
"""
from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any, Optional, Sequence

import submitit
from omegaconf import DictConfig, OmegaConf

from ..config import RunConfig, as_configured_today, to_yaml
from ..hooks import Hook
from ..registry import ENGINES
from ..storage.atomic import atomic_write_text
from ..storage.checkpoints import Checkpoints
from ..storage.lock import RunDirInUse, RunDirLock
from ..storage.logs import MetricsLog, flat_keys
from ..storage.results import RESULTS, read_results, recorded_precision
from ..training.distributed import from_main, init_from_env
from ..training.progress import run_summary

SNAPSHOT = "cell.yaml"
ATTEMPTS = "attempts.jsonl"
RUNNING_ELSEWHERE = "running in another invocation"
"""A cell's status when another live process (another istar-grid, a requeued job) holds its run directory."""
FINISHED_ELSEWHERE = "finished by another invocation"
"""A cell's outcome when another process finished it after this invocation planned it (its status: finished)."""


def write_snapshot(run_dir: Path, cfg: DictConfig) -> Path:
    """Write ``cfg`` (resolved) as the cell's frozen config."""
    run_dir.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(run_dir / SNAPSHOT, to_yaml(cfg))


def load_snapshot(run_dir: Path) -> DictConfig:
    """The frozen config, typed against ``RunConfig`` and read-only, as ``compose`` returns it."""
    path = Path(run_dir) / SNAPSHOT
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: cells are snapshotted at submission (istar-grid / istar-run -m)")
    cfg = OmegaConf.merge(OmegaConf.structured(RunConfig), OmegaConf.load(path))
    OmegaConf.set_readonly(cfg, True)
    return cfg


def differences(a: DictConfig, b: DictConfig, used_precision: Optional[str] = None) -> list[str]:
    """Dotted keys whose values differ between a run directory's config ``a`` (read as configured today) and ``b``.
    ``used_precision``: what ``precision=auto`` resolved to in ``a``'s run."""
    flat_a, flat_b = (flat_keys(OmegaConf.to_container(c, resolve=True)) for c in (a, b))
    flat_a = as_configured_today(flat_a, used_precision if flat_b.get("precision") != "auto" else None)
    return sorted(key for key in flat_a.keys() | flat_b.keys() if flat_a.get(key) != flat_b.get(key))


def is_finished(run_dir: Path, cfg: DictConfig) -> bool:
    """True when a finished ``results.json`` and the run's ``config.yaml`` are of exactly ``cfg``."""
    config_path = run_dir / "config.yaml"
    if not ((run_dir / RESULTS).is_file() and config_path.is_file()):
        return False
    results = read_results(run_dir / RESULTS, require_finished=True, strict=False)
    if results is None or differences(OmegaConf.load(config_path), cfg, recorded_precision(run_dir)):
        return False
    criterion = OmegaConf.to_container(cfg.criterion, resolve=True)
    return ((results.task, results.model, results.seed, results.criterion)
            == (cfg.task, cfg.model.name, cfg.seed, criterion))


def latest_checkpoint_step(run_dir: Path) -> int:
    """The step of the newest checkpoint in ``run_dir``, 0 when there is none."""
    return max(Checkpoints(run_dir).paths(), default=0)


class CellRunner(submitit.helpers.Checkpointable):
    """``CellRunner(hooks)(run_dir)`` trains the cell frozen in ``run_dir`` (resuming its checkpoints); its results."""

    def __init__(self, hooks: Sequence[Hook] = ()):
        self.hooks = tuple(hooks)

    def __call__(self, run_dir: str) -> dict[str, Any]:
        run_dir_path = Path(run_dir)
        cfg = load_snapshot(run_dir_path)
        try:
            environment = submitit.JobEnvironment()
        except RuntimeError:
            environment = None
        if environment is not None:
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        ranks = init_from_env(cfg.device)  # every rank of a multi-task cell follows rank 0's lock
        with contextlib.ExitStack() as held:
            skipped = None
            if ranks.is_main:  # a second start fails at once
                try:
                    held.enter_context(RunDirLock(run_dir_path))
                except RunDirInUse as error:  # another invocation runs it: left to that one, neither run nor failed
                    skipped = {"skipped": RUNNING_ELSEWHERE, "reason": str(error)}
                if skipped is None and is_finished(run_dir_path, cfg):  # since this invocation planned it
                    skipped = {"skipped": FINISHED_ELSEWHERE}
            skipped = from_main(skipped, ranks.world_size)
            if skipped is not None:
                return skipped
            if ranks.is_main:
                self._record(run_dir_path, "start", environment, resume_step=latest_checkpoint_step(run_dir_path))
            results = ENGINES.get(cfg.engine).cls(cfg, hooks=list(self.hooks)).fit()
            if ranks.is_main:
                self._record(run_dir_path, "finished", environment, step=results["step"])
                print(run_summary(results), flush=True)  # the cell's log ends with what it trained and scored
        return results

    @staticmethod
    def _record(run_dir: Path, event: str, environment: Optional[submitit.JobEnvironment], **values: Any) -> None:
        job = {"job_id": environment.job_id, "executor": environment.cluster} if environment else {"executor": "inline"}
        with MetricsLog(run_dir / ATTEMPTS) as log:
            log.append({"event": event, "host": socket.gethostname(), "pid": os.getpid(),
                        "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT"), **job, **values})


def outcome(returned: dict[str, Any]) -> str:
    """What became of a cell: ``finished`` (here), :data:`RUNNING_ELSEWHERE` or :data:`FINISHED_ELSEWHERE`."""
    return returned.get("skipped", "finished")


def attempts(run_dir: Path) -> list[dict[str, Any]]:
    """The cell's recorded starts and finishes, oldest first."""
    return MetricsLog(Path(run_dir) / ATTEMPTS).records()
