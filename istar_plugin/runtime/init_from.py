"""``init_from``: start a run from a finished run's fine-tuned model (its final checkpoint, else its ``model/``) or
from a Hugging Face folder, checked before any model loads: one :class:`InitFromError` line, or one
:class:`~istar_plugin.errors.CheckpointError` line for a final checkpoint whose bytes prove damaged."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

import torch
from omegaconf import OmegaConf

from ..errors import CheckpointError, ConfigError, one_line
from ..storage.checkpoints import Checkpoints, DamagedCheckpoint, read_checkpoint
from ..storage.results import RESULTS, ResultsError, read_results

MODEL_DIR = "model"  # a finished run's exported Hugging Face folder, in its run directory
_GENERIC_LABEL = re.compile(r"LABEL_\d+")


class InitFromError(ConfigError):
    """``init_from`` names no usable source; the message says why (``istar-run`` prints it as one line)."""


@dataclass(frozen=True)
class InitSource:
    """Where the initial weights come from: a run's final checkpoint, or a Hugging Face model folder."""

    path: Path
    checkpoint: Optional[Path] = None  # a run directory's final checkpoint; None for a model folder

    def model_config(self, model_cfg):
        """The model config to build the architecture from: a model folder replaces ``name_or_path``."""
        if self.checkpoint is not None:
            return model_cfg
        return replace(model_cfg, name_or_path=str(self.path), local_files_only=True, revision=None)

    def weights(self) -> Optional[dict]:
        """The run's final ``model`` tensors, verified (None for a model folder: the model loads it itself)."""
        if self.checkpoint is None:
            return None
        try:
            state = read_checkpoint(self.checkpoint, "cpu", keys=("model",))["model"]
        except DamagedCheckpoint as damaged:
            exported = self.path / MODEL_DIR
            instead = f"; init_from={exported} starts from its exported model" if exported.is_dir() else ""
            raise CheckpointError(f"init_from {self.path}: its final checkpoint {self.checkpoint} is damaged "
                                  f"({damaged.reason}); nothing was loaded from it{instead}") from None
        if inserted := inserted_modules(state):
            raise InitFromError(f"init_from {self.path}: its model has modules inserted before the head "
                                f"({', '.join(inserted)}); start from the run it was itself initialised from")
        return state

    def load_into(self, model: torch.nn.Module, state: dict) -> None:
        """Copy :meth:`weights` into ``model`` (built from the same base model, nothing inserted yet)."""
        try:
            load_weights(model, state)
        except (RuntimeError, ValueError) as error:  # e.g. a LoRA run's adapters into a model without LoRA
            raise InitFromError(f"init_from {self.path}: its weights do not fit this model (a LoRA run starts runs "
                                f"with the same model.lora settings): {one_line(error)[:300]}") from None


def load_weights(model, state: dict) -> None:
    """Load a checkpoint's ``model`` tensors (``load_checkpoint_state`` where the adapter has one: LoRA's subset)."""
    getattr(model, "load_checkpoint_state", model.load_state_dict)(state)


def inserted_modules(state: dict) -> list[str]:
    """The names of the modules a checkpoint's ``model`` tensors insert before the head."""
    return sorted({key.split(".")[1] for key in state if key.startswith("inserted.")})


def resolve(init_from: str, task: str, label_names: Sequence[str], name_or_path: str) -> InitSource:
    """Check ``init_from`` against this run's task, label names and base model."""
    path = Path(init_from).expanduser()
    if not path.is_dir():
        raise InitFromError(f"init_from {init_from}: no such directory")
    if (path / "config.yaml").is_file():
        return _run_directory(path, task, tuple(label_names), name_or_path)
    if (path / "config.json").is_file():
        return _model_folder(path, tuple(label_names))
    raise InitFromError(f"init_from {init_from}: neither a run directory (no config.yaml) "
                        "nor a Hugging Face model folder (no config.json)")


def _run_directory(path: Path, task: str, label_names: tuple, name_or_path: str) -> InitSource:
    config = OmegaConf.load(path / "config.yaml")
    latest = Checkpoints(path).latest()
    try:
        results = read_results(path / RESULTS, require_finished=True)
    except ResultsError as error:
        progress = f"; latest checkpoint {latest.name}" if latest else "; no checkpoint"
        raise InitFromError(f"init_from {error}" + (f"{progress}; finish it first" if error.missing else "")) from None
    exported = path / MODEL_DIR
    if latest is None and not (exported / "config.json").is_file():
        raise InitFromError(f"init_from {path}: the run finished but kept neither {MODEL_DIR}/ nor a checkpoint")
    if latest is not None and Checkpoints.step_of(latest) != results.step:
        raise InitFromError(f"init_from {path}: results.json is from step {results.step} but the latest checkpoint is "
                            f"{latest.name}: the run was resumed and has not finished")
    if config.task != task:
        raise InitFromError(f"init_from {path}: a run of task {config.task}, not {task}")
    if (saved_labels := tuple(results.label_names or label_names)) != label_names:
        raise InitFromError(f"init_from {path}: label set {list(saved_labels)} "
                            f"differs from task {task}'s {list(label_names)}")
    if config.model.name_or_path != name_or_path:
        raise InitFromError(f"init_from {path}: fine-tuned from model {config.model.name_or_path}, but this run's "
                            f"model is {name_or_path}; choose the same model (model=... or model.name_or_path=...)")
    if latest is None:  # the finished run exported its final (best) weights as a Hugging Face folder
        return _model_folder(exported, label_names)
    return InitSource(path, latest)


def _model_folder(path: Path, label_names: tuple) -> InitSource:
    config = json.loads((path / "config.json").read_text())
    if not any(name.endswith("ForSequenceClassification") for name in config.get("architectures") or ()):
        return InitSource(path)  # an encoder alone: the task head starts fresh
    id2label = config.get("id2label") or {}
    saved = tuple(id2label[key] for key in sorted(id2label, key=int)) if id2label else ()
    if (count := len(saved) or config.get("num_labels")) != len(label_names):
        raise InitFromError(f"init_from {path}: a classifier with {count} labels, "
                            f"this task has {len(label_names)} ({', '.join(label_names)})")
    if saved and not all(_GENERIC_LABEL.fullmatch(str(name)) for name in saved) and saved != label_names:
        raise InitFromError(f"init_from {path}: label set {list(saved)} differs from this task's {list(label_names)}")
    return InitSource(path)
