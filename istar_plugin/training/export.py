"""The fine-tuned model in Hugging Face format: a finished run's ``model/``, and ``istar-export`` for any checkpoint."""
from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

from omegaconf import OmegaConf

from .. import config as config_module
from ..registry import TASKS, load_plugins
from ..runtime.builder import build_model
from ..runtime.init_from import MODEL_DIR, inserted_modules
from ..errors import CheckpointError, ConfigError, ModelError, RunDirError
from ..storage.atomic import atomic_write_json, write_refusals
from ..storage.checkpoints import Checkpoints, DamagedCheckpoint, read_checkpoint
from ..storage.exports import EXPORT_RECORD
from ..storage.lock import RunDirLock
from ..storage.ownership import EXPORT_MARKER, RUN_MARKER, check_writable, mark, owned
from ..storage.results import RESULTS, ResultsError, read_results


def export_model(model, kind: str, label_names: Sequence[str], directory: str | Path, what: str = "--out",
                 record: Optional[dict[str, Any]] = None, **details: Any) -> Path:
    """Write ``model`` to ``directory`` with the export marker (``details``) and ``record``, replacing ours only."""
    directory = Path(directory)
    if not callable(getattr(model, "save_pretrained", None)):
        raise TypeError(f"{type(model).__name__} has no save_pretrained(directory); it cannot be exported")
    check_writable(directory, EXPORT_MARKER, what)
    id2label = dict(enumerate(label_names)) if kind in ("classification", "regression") and label_names else None
    label2id = id2label and {name: index for index, name in id2label.items()}  # None without a labelled head
    temporary = directory.with_name(f".{directory.name}.{secrets.token_hex(4)}.tmp")
    previous = directory.with_name(f".{directory.name}.{secrets.token_hex(4)}.old")
    try:
        with write_refusals(directory, (Exception,)):
            model.save_pretrained(temporary, id2label=id2label, label2id=label2id)
        if record is not None:
            atomic_write_json(temporary / EXPORT_RECORD, record)
        umask = os.umask(0)
        os.umask(umask)
        for path in temporary.rglob("*"):  # the mode a plain open gives (safetensors writes files owner-only)
            if path.is_file():
                path.chmod(0o666 & ~umask)
        mark(temporary, EXPORT_MARKER, **details)
        if directory.exists():
            directory.rename(previous)
        temporary.rename(directory)
        shutil.rmtree(previous, ignore_errors=True)  # an export of ours (checked above)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return directory


def checkpoint_path(run_dir: Path, step: Optional[int]) -> Path:
    """The checkpoint of ``step`` in ``run_dir`` (the latest when None)."""
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: not a directory")
    found = Checkpoints(run_dir).paths()
    if not found:
        model = run_dir / MODEL_DIR
        hint = f"; the finished run's model is in {model}" if model.is_dir() else ""
        raise FileNotFoundError(f"{run_dir}: no checkpoints (checkpoints/step_*.pt){hint}")
    chosen = max(found) if step is None else step
    if chosen not in found:
        raise FileNotFoundError(f"{run_dir}: no checkpoint of step {step}; steps: {', '.join(map(str, sorted(found)))}")
    return found[chosen]


def export_checkpoint(run_dir: str | Path, step: Optional[int] = None, out: Optional[str | Path] = None) -> Exported:
    """Export a checkpoint of the run under its lock; ``out`` defaults to ``RUN_DIR/model`` for a finished run only."""
    run_dir = Path(run_dir)
    checkpoint_path(run_dir, step)  # a missing run or checkpoint: one line, before anything is locked or loaded
    with RunDirLock(run_dir, role="run", advice="export once it has finished (or stop it)"):
        path = checkpoint_path(run_dir, step)
        state_then = run_state(run_dir)
        if state_then != "finished" and out is None:
            raise ConfigError(f"{run_dir}: the run {unfinished_words(state_then)}; its {MODEL_DIR}/ is kept for a "
                              f"finished run's model: pass --out DIR to export its checkpoint {path.name} anyway")
        if out is not None:
            refuse_final_model_folder(Path(out), run_dir, path, state_then)
        try:
            state = read_checkpoint(path, "cpu", keys=("model", "config", "step"))
        except DamagedCheckpoint as damaged:
            raise CheckpointError(f"{path}: {damaged.reason}; nothing exported (another step: --step)") from None
        inserted = inserted_modules(state["model"])
        if inserted:
            raise ModelError(f"{run_dir}: the model has modules inserted before its head ({', '.join(inserted)}), "
                             "which a Hugging Face folder has no place for; nothing exported. "
                             f"Load {path} with istar_plugin instead: istar-analyze RUN_DIR, "
                             "or Trainer(cfg) and load_state_dict(state['model'])")
        load_plugins()
        cfg = OmegaConf.create(state["config"])
        task = TASKS.build(cfg.task, config_module.data_config(cfg))
        model = build_model(cfg, task, state=state["model"]).model
        if out is None:
            out = run_dir / (MODEL_DIR if step is None else f"{MODEL_DIR}_step_{state['step']}")
        record = {"run": str(run_dir.resolve()), "run_state": state_then, "step": state["step"],
                  "checkpoint": str(path.relative_to(run_dir)), "finished_result": state_then == "finished"}
        directory = export_model(model, task.kind, task.label_names, out, record=record, run=str(run_dir.resolve()),
                                 step=state["step"], run_state=state_then)
        return Exported(directory, state["step"], state_then)


def refuse_final_model_folder(out: Path, run_dir: Path, path: Path, state: str) -> None:
    """Refuse an ``--out`` that is a run directory's ``model/`` unless ``path`` is that finished run's final model
    (its latest checkpoint): that folder holds a finished run's final model alone, often its only copy."""
    owner = out.parent
    if out.name != MODEL_DIR or not owned(owner, RUN_MARKER):
        return
    if owner.resolve() != run_dir.resolve():
        why = f"it is kept for the run {owner}'s final model, and {path.name} is of the run {run_dir}"
    elif state != "finished":
        why = f"it is kept for a finished run's model, and the run {unfinished_words(state)}"
    elif Checkpoints.step_of(path) != max(Checkpoints(run_dir).paths()):
        why = f"it is kept for the run's final model, and {path.name} is not its latest checkpoint"
    else:
        return
    raise RunDirError(f"--out {out}: {why}; choose another --out, nothing was changed")


class Exported(NamedTuple):
    """Where an export went, the checkpoint's step, and the run's state then."""

    directory: Path
    step: int
    run: str


def unfinished_words(state: str) -> str:
    """How a message says the run is not finished, from its :func:`run_state`."""
    if state.startswith("failed: "):
        return f"failed ({state.removeprefix('failed: ')})"
    return "is unfinished (no results.json yet)" if state == "unfinished" else f"is not finished ({state})"


def run_state(run_dir: Path) -> str:
    """``finished``, ``failed: REASON`` or ``unfinished``, from the run's results.json."""
    try:
        record = read_results(run_dir / RESULTS)
    except ResultsError as error:
        return "unfinished" if error.missing else f"unreadable results.json ({error.problem})"
    return "finished" if record.finished else f"failed: {record.reason}"
