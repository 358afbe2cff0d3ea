"""The one model builder, every caller's: a run's model adapter (``init_from``'s weights, its padding mode, the
criterion's changes, a checkpoint's weights), or the ``SentenceTransformer`` of ``engine=sentence_transformers``."""
from __future__ import annotations

import contextlib
from typing import Any, NamedTuple, Optional

from omegaconf import DictConfig

from .. import config as config_module
from ..errors import ModelError, one_line
from ..models.loading import restoring_weights
from ..models.padding_free import INCLUDED_PADDING
from ..models.paths import resolve_model_path
from ..models.st_padding_free import make_padding_free
from ..registry import CRITERIONS, MODELS
from .init_from import load_weights, resolve as resolve_init_from


class Built(NamedTuple):
    """The model adapter and the criterion that adapted it."""

    model: Any
    criterion: Any


def build_model(cfg: DictConfig, task, state: Optional[dict] = None, quiet: bool = False, device=None) -> Built:
    """The run's model and criterion, as the run trained them; ``state``: a checkpoint's ``model`` tensors."""
    model_cfg = config_module.model_config(cfg)
    if cfg.get("engine", "istar") == "sentence_transformers":
        return Built(_sentence_transformer(cfg, model_cfg.name_or_path, device), None)
    source = weights = None
    if cfg.get("init_from"):
        source = resolve_init_from(cfg.init_from, cfg.task, task.label_names, model_cfg.name_or_path)
        model_cfg = source.model_config(model_cfg)
        weights = source.weights() if state is None else None  # read and verified before the model loads
    quiet = quiet or state is not None or (source is not None and source.checkpoint is not None)
    try:
        with restoring_weights() if quiet else contextlib.nullcontext():
            model = MODELS.get(cfg.model.adapter).cls(model_cfg, task.kind, max(task.num_labels, 1))
    except (OSError, ImportError) as error:
        raise ModelError(f"model {model_cfg.name_or_path!r} cannot be loaded: {one_line(error)[:300]}") from None
    if weights is not None:
        source.load_into(model, weights)
    if cfg.criterion.get("padding") == "include" and getattr(model, "padding_free", False):
        model.keep_padding(INCLUDED_PADDING)  # model.padding_free=auto: true is refused at compose time
    criterion = CRITERIONS.get(cfg.criterion.name).cls(config_module.criterion_config(cfg), task.kind)
    if (adapt := getattr(criterion, "adapt", None)) is not None:  # the criterion's changes to the model
        adapt(model)
    if state is not None:
        load_weights(model, state)
    return Built(model, criterion)


def _sentence_transformer(cfg: DictConfig, name_or_path: str, device):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(resolve_model_path(name_or_path), device=None if device is None else str(device))
    model.max_seq_length = cfg.data.max_length
    model.padding_free, model.padding_free_line = make_padding_free(model, cfg.model.get("padding_free", False))
    return model
