"""A run's model loaded for reading (nothing written, no lock), built as the trainer builds it, with the weights of
its final checkpoint, a given step's, or its exported ``model/``, in eval mode on the run's device and precision."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from .. import config as config_module
from ..data.packaged import seeded_split
from ..registry import TASKS, load_plugins
from ..runtime.batching import collate
from ..runtime.builder import build_model
from ..runtime.devices import pick_device
from ..runtime.init_from import MODEL_DIR
from ..runtime.precision import autocast, choose_precision
from ..runtime.rng import seed_everything
from ..storage.checkpoints import Checkpoints


@dataclass
class LoadedModel:
    """A model adapter in eval mode with what it takes to feed it one of its task's splits."""

    cfg: DictConfig
    task: Any
    model: Any
    device: torch.device
    precision: str
    history: list = field(default_factory=list)  # the evaluations the loaded checkpoint records

    tokenizer = property(lambda self: self.model.tokenizer)
    eval_batch_size = property(lambda self: self.cfg.eval_batch_size or self.cfg.batch_size)

    def features(self, split: str) -> list[dict]:
        """The split's encoded features, as the trainer encodes them (``train`` without its validation share)."""
        examples = self.task.load(split)
        if split == "train" and (fraction := self.cfg.data.get("validation_split")):
            examples, _ = seeded_split(examples, fraction, self.cfg.data.split_seed)
        return self.task.encode(examples, self.tokenizer, train=split == "train")

    def collate(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        """Pad ``features`` into one device batch (:func:`~istar_plugin.runtime.batching.collate`)."""
        return collate(features, self.tokenizer.pad_token_id or 0, self.device)

    def autocast(self):
        """The forward pass's precision context, the run's."""
        return autocast(self.precision, self.device)


def load_run(run_dir: Path, step: Optional[int] = None) -> LoadedModel:
    """The run's final model (its latest checkpoint, else its ``model/``) or its checkpoint of ``step``."""
    cfg = OmegaConf.load(run_dir / "config.yaml")
    checkpoints = Checkpoints(run_dir)
    if step is None and checkpoints.latest() is None:  # the Hugging Face folder holds the fine-tuned encoder and head
        cfg.model.name_or_path, cfg.model.local_files_only, cfg.model.revision = str(run_dir / MODEL_DIR), True, None
        cfg.init_from = None  # the folder is the architecture and the weights
        return load_pretrained(cfg)
    chosen = max(checkpoints.paths()) if step is None else step  # read only: a damaged one is refused, not renamed
    return load_pretrained(cfg, state=checkpoints.load_step(chosen, map_location="cpu"))


def load_pretrained(cfg: DictConfig, state: Optional[dict] = None) -> LoadedModel:
    """The model ``istar-run`` with ``cfg`` starts from (``init_from``'s weights included), or a checkpoint's."""
    load_plugins()
    device = pick_device(cfg.device)
    seed_everything(cfg.seed)  # any weight no file supplies starts as it did in the run
    task = TASKS.build(cfg.task, config_module.data_config(cfg))
    model = build_model(cfg, task, state=None if state is None else state["model"]).model
    model.to(device).eval()
    return LoadedModel(cfg, task, model, device, choose_precision(cfg.precision, device),
                       list(state["history"]) if state is not None else [])
