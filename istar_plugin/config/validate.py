"""The checks a composed config passes before anything loads: finite numbers, each key's declared range or choices,
the device, the typed views', criterion's, task's and engine's own checks, and the combinations no single key can
refuse."""
from __future__ import annotations

import math
import platform
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..data.config import DataConfig
from ..data.task import HELD_OUT, check_validation_split
from ..errors import ConfigError
from ..models.config import ModelConfig
from ..models.preflight import model_width
from ..registry import CRITERIONS, ENGINES, MODELS, TASKS
from ..settings import refusal
from .schema import DEVICE_PATTERN, FILE_KEYS, OptimConfig, RunConfig
from .views import criterion_config, data_config, model_config


def non_finite_values(node: Any, prefix: str = "") -> list[str]:
    """Dotted keys holding NaN or an infinity."""
    if isinstance(node, dict):
        return sorted(key for name, value in node.items() for key in non_finite_values(value, f"{prefix}{name}."))
    if isinstance(node, (list, tuple)):
        return [key for index, value in enumerate(node)
                for key in non_finite_values(value, f"{prefix.rstrip('.')}[{index}].")]
    if isinstance(node, float) and not math.isfinite(node):
        return [prefix.rstrip(".")]
    return []


def validate(cfg: DictConfig) -> None:
    """Refuse a config that cannot run, in one :class:`ConfigError` line."""
    if bad := non_finite_values(OmegaConf.to_container(cfg, resolve=True)):
        values = ", ".join(f"{key}={OmegaConf.select(cfg, key.split('[')[0])}" for key in bad)
        raise ConfigError(f"{values}: config values must be finite numbers (no NaN or inf)")
    for cls, values, prefix in ((RunConfig, cfg, ""), (OptimConfig, cfg.optim, "optim."),
                                (ModelConfig, cfg.model, "model."), (DataConfig, cfg.data, "data.")):
        problem = refusal(cls, {key: values[key] for key in values if not OmegaConf.is_config(values[key])}, prefix)
        if problem is not None:
            raise ConfigError(problem)
    if not DEVICE_PATTERN.fullmatch(str(cfg.device)):
        raise ConfigError(f"device={cfg.device!r} unknown; choose one of: auto, cpu, cuda, cuda:N, mps")
    if cfg.device == "mps" and platform.system() != "Darwin":
        raise ConfigError(f"device='mps' is Apple's GPU (Metal), found on macOS only; this machine runs "
                          f"{platform.system()}: choose one of: auto, cpu, cuda, cuda:N (cuda: with a CUDA GPU)")
    if cfg.precision == "fp16" and cfg.device == "cpu":
        raise ConfigError("precision=fp16 needs a GPU; use fp32 or bf16 on CPU (device=cpu)")
    try:
        criterion_cfg = criterion_config(cfg)
        data_cfg = data_config(cfg)
        lora = model_config(cfg).lora
        lora.check()
        if (weights := getattr(criterion_cfg, "penalised_weights", None)) is not None and lora.enabled:
            raise ConfigError(f"criterion={cfg.criterion.name} penalises {weights}, which LoRA freezes "
                              f"(model.lora.r={lora.r}): the penalty would stay constant and change nothing; train "
                              "every parameter (model.lora.r=0) or penalise what LoRA trains (e.g. criterion=cosreg "
                              "criterion.target=hidden)")
        criterion = CRITERIONS.get(cfg.criterion.name).compose_time
        if (check_setup := getattr(criterion, "check_setup", None)) is not None:
            check_setup(criterion_cfg, MODELS.get(cfg.model.adapter).compose_time,
                        getattr(TASKS.get(cfg.task).compose_time, "kind", None))
        if (check_data := getattr(TASKS.get(cfg.task).compose_time, "check_data", None)) is not None:
            check_data(data_cfg)
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None
    try:
        engine = ENGINES.get(cfg.engine).compose_time
    except KeyError as error:
        raise ConfigError(f"engine={cfg.engine!r}: {error.args[0]}") from None
    if hasattr(engine, "check_config"):
        engine.check_config(cfg)
    given = [key for key in FILE_KEYS if OmegaConf.select(cfg, key) is not None]
    if given and cfg.data.source != "files":
        raise ConfigError(f"{', '.join(given)} is read only with data.source=files, not data.source={cfg.data.source}; "
                          "drop data.source= (files is then inferred) or the file settings")
    if cfg.patience is not None and (cfg.patience < 1 or not cfg.data.validation_split):
        raise ConfigError(f"patience={cfg.patience} needs a positive patience and a validation set, e.g. "
                          "data.validation_split=0.3 "
                          f"(got data.validation_split={cfg.data.validation_split})")
    if cfg.data.eval_split == HELD_OUT and not cfg.data.validation_split:
        raise ConfigError(f"data.eval_split={HELD_OUT} evaluates on the share of the training set that "
                          "data.validation_split holds out: set data.validation_split (e.g. 0.1)")
    if cfg.data.validation_split and cfg.data.max_train_samples:  # else checked once the training set is read
        check_validation_split(cfg.data.validation_split, cfg.data.max_train_samples,
                               f"data.max_train_samples={cfg.data.max_train_samples} keeps")
    if getattr(criterion, "needs_init_from", False) and not cfg.init_from:
        raise ConfigError(f"criterion {cfg.criterion.name} trains on a fine-tuned model: set init_from=RUN_DIR "
                          "(a finished run's directory) or init_from=HF_MODEL_FOLDER")
    check_hidden_size = getattr(criterion, "check_hidden_size", None)
    hidden_size = model_width(cfg) if check_hidden_size is not None else None  # last: it may read the model's config
    if hidden_size is not None:
        try:
            check_hidden_size(criterion_cfg, hidden_size)
        except ValueError as error:
            raise ConfigError(str(error)) from None
