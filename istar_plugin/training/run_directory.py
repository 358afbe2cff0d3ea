"""One run directory's lifecycle for every engine: lock, config, logs, ``results.json``; only the main rank writes."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ..errors import RunDirError
from ..storage.atomic import atomic_write_text, remove_stale_temporaries
from ..storage.checkpoints import Checkpoints
from ..storage.lock import RunDirLock
from ..storage.logs import MetricsLog, TensorBoardLog
from ..storage.ownership import RUN_MARKER, check_writable, mark
from ..storage.provenance import PROVENANCE, machine
from ..storage.results import RESULTS, ResultsRecord, failed_record, read_results, write_results
from .resume import described_changes

class RunDirectory:
    """``RunDirectory(cfg.output_dir, is_main=..., tensorboard=cfg.tensorboard).open()`` ... ``close()``."""

    def __init__(self, path: str | Path, *, is_main: bool, tensorboard: bool):
        self.path = Path(path)
        self.is_main = is_main
        self.lock: Optional[RunDirLock] = None
        self.metrics: Optional[MetricsLog] = MetricsLog(self.path / MetricsLog.FILENAME) if is_main else None
        self.tensorboard = TensorBoardLog(self.path / "tensorboard", enabled=is_main and bool(tensorboard))

    def open(self) -> "RunDirectory":
        """Refuse a folder of someone else's files, lock the directory and remove stale temporaries (main process)."""
        if self.is_main:
            check_writable(self.path, RUN_MARKER, "output_dir")
            self.lock = RunDirLock(self.path).acquire()
            for directory in (self.path, self.path / "checkpoints"):
                remove_stale_temporaries(directory)
        return self

    def finished(self, cfg: DictConfig, total_steps: int, checkpoints: Optional[Checkpoints] = None
                 ) -> Optional[dict[str, Any]]:
        """The saved results of the run ``cfg`` if it finished here (its checkpoints removed), else None."""
        results_path = self.path / RESULTS
        if (checkpoints or Checkpoints(self.path)).latest() is not None or not results_path.is_file():
            return None
        record = read_results(results_path)  # a malformed or too new file: one ResultsError line
        if not record.finished:  # a diverged run is trained again, not returned as a result
            return None
        if not cfg.resume:
            raise RunDirError(f"{self.path} already holds a finished run (results.json) and resume=false; "
                              "choose another output_dir")
        saved_config = OmegaConf.to_container(OmegaConf.load(self.path / "config.yaml"), resolve=True)
        if changed := described_changes(saved_config, OmegaConf.to_container(cfg, resolve=True)):
            raise RunDirError(f"{self.path} holds the results of a different run (changed: {changed}); "
                              "choose another output_dir")
        if record.step is None or record.step < total_steps:
            raise RunDirError(f"{self.path} holds a run finished at step {record.step} whose checkpoints were "
                              f"removed when it finished (keep_checkpoints); it cannot continue to step {total_steps}: "
                              "choose another output_dir")
        return record.to_json()

    def start(self, cfg: DictConfig, board_metrics: tuple[str, ...] = ()) -> None:
        """The marker, ``config.yaml``, and with ``board_metrics`` the config for TensorBoard against those tags."""
        if not self.is_main:
            return
        if not (self.path / RUN_MARKER).is_file():
            mark(self.path, RUN_MARKER, task=cfg.task, criterion=cfg.criterion.name, seed=cfg.seed)
        atomic_write_text(self.path / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        if board_metrics:
            self.tensorboard.config(OmegaConf.to_container(cfg, resolve=True), list(board_metrics))

    def log(self, values: dict[str, Any], step: int, board_prefix: str = "") -> None:
        """``values`` as a ``metrics.jsonl`` record of ``step`` and as TensorBoard scalars (under ``board_prefix``)."""
        if not self.is_main:
            return
        self.metrics.append({"step": step, **values})
        self.tensorboard.scalars(values, step, prefix=board_prefix)

    def metrics_bytes(self) -> Optional[int]:
        """How long ``metrics.jsonl`` is now (None on other ranks)."""
        return self.metrics.size() if self.metrics is not None else None

    def restart_logs(self, step: int = -1, metrics_bytes: Optional[int] = 0) -> None:
        """Drop what an earlier attempt logged after ``step`` (``metrics.jsonl`` cut to ``metrics_bytes``), or all."""
        if self.metrics is not None:
            self.metrics.truncate(metrics_bytes)
        self.tensorboard.purge_step = step + 1

    def write_results(self, record: ResultsRecord) -> ResultsRecord:
        """Write ``results.json`` stamped with its machine (main process) and end the TensorBoard log; returns it."""
        if self.is_main:
            record = replace(record, extra={**record.extra, PROVENANCE: machine()})
            write_results(self.path / RESULTS, record)
        self.tensorboard.close()
        return record

    def write_failure(self, reason: str, cfg: DictConfig) -> None:
        """``results.json`` saying the run failed and why."""
        criterion = OmegaConf.to_container(cfg.criterion, resolve=True)
        self.write_results(failed_record(reason, cfg.task, cfg.model.name, criterion, cfg.seed))

    def close(self) -> None:
        """Close the logs and release the lock."""
        if self.metrics is not None:
            self.metrics.close()
        self.tensorboard.close()
        if self.lock is not None:
            self.lock.release()
            self.lock = None

