"""Run configuration: typed dataclasses, recipes (YAML) and command-line composition with OmegaConf.

``compose(["recipe=sst2", "criterion=istar", "model=minilm", "criterion.lam=-3", "seed=2"])`` builds the
config from, in order: the dataclass defaults, the recipe YAML, the model preset, the recipe's tuned
criterion parameters for that model (the paper's Table 2), then the dotted overrides. Unknown keys and
wrong types fail naming the key and the allowed ones.

>>> cfg = compose(["recipe=movie_snippets", "criterion=istar", "criterion.lam=-2"])
>>> cfg.task, cfg.criterion.name, cfg.criterion.lam, cfg.model.name
('movie_snippets', 'istar', -2.0, 'minilm')
"""
from __future__ import annotations

import difflib
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigKeyError, InterpolationResolutionError, OmegaConfBaseException, ValidationError

from .data.config import DataConfig
from .errors import ConfigError
from .models.config import LoraSettings, ModelConfig
from .models.preflight import check_model_limits
from .registry import CRITERIONS, ENGINES, MODELS, TASKS
from .settings import added_keys, declared, describe, refusal, setting

GROUPS = ("recipe", "criterion", "model")
RECIPES_ENV = "ISTAR_RECIPES"


PRECISIONS = ("fp32", "bf16", "fp16")
PRECISION_CHOICES = ("auto", *PRECISIONS)
"""``precision=``: ``auto`` (bf16 where native, else fp16 on GPU, fp32 on CPU) or one of :data:`PRECISIONS`."""
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?|mps")
_SEED = dict(low=0, high=2 ** 32 - 1)  # what numpy, torch and random all take


@dataclass
class OptimConfig:
    lr: float = setting(2e-5, help="peak learning rate (AdamW)", low=0, low_open=True)
    weight_decay: float = setting(0.01, help="AdamW weight decay", low=0)
    warmup_ratio: float = setting(0.06, help="share of the optimizer steps warming the learning rate up", low=0, high=1)
    adam_eps: float = setting(1e-8, help="AdamW epsilon", low=0, low_open=True)
    epochs: int = setting(3, help="passes over the training set", low=1)
    grad_accum: int = setting(2, help="batches accumulated per optimizer step (the paper: 2)", low=1)
    max_grad_norm: float = setting(1.0, help="gradient clipping norm; 0 disables clipping", low=0)
    schedule: str = setting("linear", help="after warmup: linear decay to 0, or constant",
                            choices=("linear", "constant"))
    overflow_patience: int = setting(25, help="fp16: consecutive steps the GradScaler may skip on overflow before the "
                                     "run fails", low=0)


@dataclass
class RunConfig:
    engine: str = setting("istar", help="what trains the run: the toolkit's trainer (istar), or a registered engine "
                          "(sentence_transformers)", added=True)
    task: str = setting("movie_snippets", help="the registered task (istar-run --list tasks)")
    recipe: Optional[str] = setting(None, help="the recipe YAML the config started from")
    criterion: Any = setting(None, help="the registered criterion's settings, plus its name (istar-run --list "
                             "criterions)")
    model: Any = setting(None, help="ModelConfig's settings plus name (preset) and adapter (registered class)")
    data: DataConfig = setting(default_factory=DataConfig, help="where the task's examples come from (data.*)")
    optim: OptimConfig = setting(default_factory=OptimConfig, help="the optimizer and its schedule (optim.*)")
    batch_size: int = setting(32, help="training examples per batch", low=1)
    eval_batch_size: Optional[int] = setting(None, help="evaluation examples per batch; None: batch_size", low=1)
    seed: int = setting(42, help="seeds the model's head, dropout and the data order", **_SEED)
    max_steps: Optional[int] = setting(None, help="optimizer steps; caps the epochs", low=1)
    eval_every: Optional[int] = setting(None, help="optimizer steps between evaluations; None: at each epoch end",
                                        low=1)
    init_from: Optional[str] = setting(None, help="a finished run's directory, or a Hugging Face model folder "
                                       "(istar_plugin.training.init_from)")
    patience: Optional[int] = setting(None, help="early stopping: evaluations on data.validation_split without "
                                      "improvement")
    eval_before_training: bool = setting(True, help="the step-0 evaluation: metric and IsoScore* before fine-tuning")
    save_every: Optional[int] = setting(None, help="optimizer steps between checkpoints; always at each epoch end",
                                        low=1)
    keep_checkpoints: Optional[int] = setting(None, help="None: the last 2 while running, none once finished (model/ "
                                              "stays); N: the last N", low=1,
                                              refused="{key} must be an integer >= 1 (or null: none once the run "
                                                      "finished), got {value}")
    log_every: int = setting(10, help="optimizer steps between log lines", low=1)
    output_dir: str = setting("runs/${task}/${criterion.name}/seed${seed}", help="the run directory")
    resume: bool = setting(True, help="continue from output_dir's latest checkpoint; false: refuse a directory that "
                           "has one")
    device: str = setting("auto", help="auto | cpu | cuda | cuda:N | mps")
    precision: str = setting("auto", help="auto: bf16 where native, else fp16 on GPU, fp32 on CPU",
                             choices=PRECISION_CHOICES)
    progress: bool = setting(True, help="tqdm bars on a terminal, else a log line every log_every steps and per "
                             "evaluation")
    tensorboard: bool = setting(True, help="write TensorBoard logs in output_dir/tensorboard")


def recipe_dirs() -> list[Path]:
    """Where recipes are looked up: ``$ISTAR_RECIPES`` (``:``-separated), the source tree, the install prefix."""
    dirs = [Path(p) for p in os.environ.get(RECIPES_ENV, "").split(os.pathsep) if p]
    dirs += [Path(__file__).resolve().parents[1] / "recipes", Path(sys.prefix) / "share" / "istar_plugin" / "recipes"]
    return [d for d in dirs if d.is_dir()]


def available(subdir: str = "") -> list[str]:
    """Names of the YAML files in the recipe directories (``subdir="model"`` for model presets)."""
    names = {p.stem for d in recipe_dirs() for p in (d / subdir).glob("*.yaml")}
    return sorted(names)


def find_yaml(name: str, subdir: str = "") -> Optional[Path]:
    if name.endswith((".yaml", ".yml")) and Path(name).is_file():
        return Path(name)
    for directory in recipe_dirs():
        candidate = directory / subdir / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return None


def load_yaml(path: Path, what: str) -> DictConfig:
    """A recipe-like YAML file as a config; empty files, non-mappings and malformed YAML fail naming the file."""
    try:
        loaded = OmegaConf.load(path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, OmegaConfBaseException) as error:
        detail = " ".join(str(error).split())
        raise ConfigError(f"{what} {path} cannot be read as YAML: {detail}") from None
    if not isinstance(loaded, DictConfig) or not loaded:
        raise ConfigError(f"{what} {path} is empty or not a mapping of keys to values")
    return loaded


def sibling_cell(*changes, _root_) -> str:
    """``${cell:LABEL,VALUE,...}``: the run directory of the grid cell named like this run's (the last part of
    ``output_dir``, ``label=value`` parts joined by ``,``) with each LABEL's part set to VALUE.

    >>> cfg = OmegaConf.create({"output_dir": "/g/recipe=rte,seed=1,criterion=isolayer",
    ...                         "x": "${cell:criterion,cross_entropy}"})
    >>> cfg.x
    '/g/recipe=rte,seed=1,criterion=cross_entropy'
    """
    run_dir = Path(str(_root_.output_dir))
    parts = [part.partition("=") for part in run_dir.name.split(",")]
    if not all(sep for _, sep, _ in parts):
        raise ConfigError(f"${{cell:...}} names a sibling grid cell, but output_dir {run_dir} is not a grid cell's "
                          "directory (label=value,...)")
    named = {label: value for label, _, value in parts}
    labels, values = changes[::2], changes[1::2]
    if len(labels) != len(values) or not set(map(str, labels)) <= set(named):
        raise ConfigError(f"${{cell:{','.join(map(str, changes))}}}: expected LABEL,VALUE pairs with LABEL one of "
                          "this cell's "
                          f"({', '.join(named)})")
    named.update({str(label): str(value) for label, value in zip(labels, values)})
    return str(run_dir.parent / ",".join(f"{label}={value}" for label, value in named.items()))


def value_for_task(*pairs, _root_) -> Any:
    """``${for_task:TASK,VALUE,...}``: the VALUE paired with this run's ``task``, for a grid that sets one option per
    task (Table 2's zeta for RTE and MRPC); a task with no pair is an error naming the ones given.

    >>> cfg = OmegaConf.create({"task": "mrpc", "zeta": "${for_task:rte,0.8,mrpc,0.6}"})
    >>> cfg.zeta
    0.6
    """
    tasks, values = [str(task) for task in pairs[::2]], pairs[1::2]
    if not tasks or len(tasks) != len(values):
        raise ConfigError(f"${{for_task:{','.join(map(str, pairs))}}}: expected TASK,VALUE pairs")
    if str(_root_.task) not in tasks:
        raise ConfigError(f"${{for_task:...}} has no value for task {_root_.task!r}; it gives: {', '.join(tasks)}")
    return values[tasks.index(str(_root_.task))]


if not OmegaConf.has_resolver("cell"):
    OmegaConf.register_resolver("cell", sibling_cell, annotation_validation="off")
if not OmegaConf.has_resolver("for_task"):
    OmegaConf.register_resolver("for_task", value_for_task)


def split_arguments(arguments: list[str]) -> tuple[dict[str, str], list[str]]:
    """Separate ``group=option`` choices from ``key.sub=value`` overrides."""
    groups, overrides = {}, []
    for argument in arguments:
        key, sep, value = argument.partition("=")
        if not sep or not key:
            raise ConfigError(f"argument {argument!r} is not of the form key=value")
        if key in GROUPS:
            groups[key] = value
        else:
            overrides.append(argument)
    return groups, overrides


def _merge(base: DictConfig, update: Any, where: str) -> DictConfig:
    try:
        return OmegaConf.merge(base, update)
    except ConfigKeyError as error:
        raise ConfigError(f"{where}: unknown key {_full_key(error)!r}; allowed: {_allowed(base, error)}") from None
    except (ValidationError, OmegaConfBaseException) as error:
        raise ConfigError(f"{where}: bad value for {_full_key(error)!r}: {error.msg}") from None


def _full_key(error: OmegaConfBaseException) -> str:
    return str(getattr(error, "full_key", None) or getattr(error, "key", "?"))


def _allowed(base: DictConfig, error: OmegaConfBaseException) -> str:
    parent = ".".join(_full_key(error).split(".")[:-1])
    node = OmegaConf.select(base, parent) if parent else base
    return ", ".join(sorted(node.keys())) if isinstance(node, DictConfig) else "(none)"


def _criterion_node(name: str, params: dict) -> DictConfig:
    entry = CRITERIONS.get(name)
    node = OmegaConf.structured(entry.config_cls) if entry.config_cls else OmegaConf.create({})
    node = _merge(node, params, f"criterion {name!r}")
    with open_dict(node):
        node.name = name
    return node


def _model_node(name: str) -> DictConfig:
    node = OmegaConf.structured(ModelConfig)
    preset = find_yaml(name, "model")
    if preset is not None:
        values = load_yaml(preset, "model preset")
        adapter = values.pop("adapter", "hf_auto")
        node = _merge(node, values, f"model preset {preset}")
    elif name in MODELS:
        adapter = name
    else:
        raise ConfigError(
            f"unknown model {name!r}; presets: {', '.join(available('model')) or '(none)'}; "
            f"registered adapters: {', '.join(MODELS.names())}"
        )
    MODELS.get(adapter)
    with open_dict(node):
        node.name, node.adapter = name, adapter
    return node


FILE_KEYS = ("data.dir", "data.train_file", "data.eval_file")


def _infer_files_source(overrides: list[str]) -> list[str]:
    """``data.dir=`` (or a data file) given without ``data.source=`` means ``data.source=files``.

    >>> _infer_files_source(["data.dir=../shared/data/sst2"])
    ['data.dir=../shared/data/sst2', 'data.source=files']
    """
    keys = {override.partition("=")[0] for override in overrides}
    if keys & set(FILE_KEYS) and "data.source" not in keys:
        return [*overrides, "data.source=files"]
    return overrides


ADDED_KEYS: dict[str, Any] = {**added_keys(RunConfig), **added_keys(ModelConfig, "model.")}
"""Config keys added after runs were written without them, each with the value that does what those runs did: a
run directory whose config lacks such a key and a config holding that value describe the same run (a grid resumes
it). A new key must default to the old behaviour and be declared ``setting(..., added=True)``
(``tests/test_compatibility.py``)."""


def as_configured_today(flat: dict[str, Any], used_precision: Optional[str] = None) -> dict[str, Any]:
    """A run's flat config (dotted keys) as a config written today would say it: each key of :data:`ADDED_KEYS` it
    lacks at its old-behaviour value, and ``precision=auto`` as the precision the run used, when known.

    >>> as_configured_today({"seed": 1, "precision": "auto"}, used_precision="fp32")["precision"]
    'fp32'
    >>> as_configured_today({"seed": 1})["model.lora.r"]
    0
    """
    today = {**ADDED_KEYS, **flat}
    if used_precision is not None and today.get("precision") == "auto":
        today["precision"] = used_precision
    return today


def _layer_ranges(overrides: list[str]) -> list[str]:
    """``criterion.layers=START:STOP`` is the layers START to STOP - 1, as a Python range.

    >>> _layer_ranges(["criterion.layers=2:5", "seed=1"])
    ['criterion.layers=[2,3,4]', 'seed=1']
    """
    result = []
    for override in overrides:
        key, _, value = override.partition("=")
        start, colon, stop = value.partition(":")
        if key == "criterion.layers" and colon:
            if not (start.isdigit() and stop.isdigit() and int(start) < int(stop)):
                raise ConfigError(f"criterion.layers={value} is not a range START:STOP of layers with START < STOP "
                                  "(e.g. 8:22, the layers 8 to 21), nor a list such as [3,6]")
            override = f"{key}=[{','.join(str(i) for i in range(int(start), int(stop)))}]"
        result.append(override)
    return result


def compose(arguments: list[str]) -> DictConfig:
    """Build the resolved, read-only run config from command-line style arguments."""
    groups, overrides = split_arguments(arguments)
    cfg = OmegaConf.structured(RunConfig)
    recipe: DictConfig = OmegaConf.create({})
    if "recipe" in groups:
        path = find_yaml(groups["recipe"])
        if path is None:
            raise ConfigError(f"unknown recipe {groups['recipe']!r}; available: {', '.join(available()) or '(none)'}")
        recipe = load_yaml(path, "recipe")
        with open_dict(recipe):
            recipe.recipe = groups["recipe"]
    defaults = recipe.pop("defaults", {}) if "defaults" in recipe else {}
    tuned = recipe.pop("tuned", {}) if "tuned" in recipe else {}
    criterion_name = groups.get("criterion") or defaults.get("criterion", "cross_entropy")
    model_name = groups.get("model") or defaults.get("model", "minilm")
    with open_dict(cfg):
        cfg.model = _model_node(model_name)
        cfg.criterion = _criterion_node(criterion_name, dict(tuned.get(criterion_name, {}).get(model_name, {})))
    cfg = _merge(cfg, recipe, f"recipe {groups.get('recipe')}")
    cfg = _merge(cfg, OmegaConf.from_dotlist(_layer_ranges(_infer_files_source(overrides))), "command line")
    if cfg.task not in TASKS:
        raise ConfigError(f"unknown task {cfg.task!r}; registered tasks: {', '.join(TASKS.names())}")
    try:
        _validate(cfg)
        OmegaConf.resolve(cfg)
    except InterpolationResolutionError as error:  # ${cell:...}, ${for_task:...} or a key that does not exist
        if isinstance(error.__cause__, ConfigError):
            raise error.__cause__ from None
        raise ConfigError(f"{error.full_key}: {' '.join(str(error).split())}") from None
    check_model_limits(cfg, lenient=True, kind=getattr(TASKS.get(cfg.task).compose_time, "kind", None))
    OmegaConf.set_readonly(cfg, True)
    return cfg


def non_finite_values(node: Any, prefix: str = "") -> list[str]:
    """Dotted keys holding NaN or an infinity.

    >>> non_finite_values({"optim": {"lr": float("nan")}, "criterion": {"lam": 1.0, "layers": [1, float("inf")]}})
    ['criterion.layers[1]', 'optim.lr']
    """
    if isinstance(node, dict):
        return sorted(key for name, value in node.items() for key in non_finite_values(value, f"{prefix}{name}."))
    if isinstance(node, (list, tuple)):
        return [key for index, value in enumerate(node)
                for key in non_finite_values(value, f"{prefix.rstrip('.')}[{index}].")]
    if isinstance(node, float) and not math.isfinite(node):
        return [prefix.rstrip(".")]
    return []


def _validate(cfg: DictConfig) -> None:
    """Refuse NaN/inf anywhere, out-of-range numbers and unknown choices, then build the typed dataclasses once
    so their own checks (ranges, choices) run before any work starts."""
    bad = non_finite_values(OmegaConf.to_container(cfg, resolve=True))
    if bad:
        values = ", ".join(f"{key}={OmegaConf.select(cfg, key.split('[')[0])}" for key in bad)
        raise ConfigError(f"{values}: config values must be finite numbers (no NaN or inf)")
    for cls, values, prefix in ((RunConfig, cfg, ""), (OptimConfig, cfg.optim, "optim."),
                                (ModelConfig, cfg.model, "model."), (DataConfig, cfg.data, "data.")):
        problem = refusal(cls, {key: values[key] for key in values if not OmegaConf.is_config(values[key])}, prefix)
        if problem is not None:
            raise ConfigError(problem)
    if not DEVICE_PATTERN.fullmatch(str(cfg.device)):
        raise ConfigError(f"device={cfg.device!r} unknown; choose one of: auto, cpu, cuda, cuda:N, mps")
    try:
        criterion_cfg = criterion_config(cfg)
        data_config(cfg)
        model_config(cfg)
        check_setup = getattr(CRITERIONS.get(cfg.criterion.name).compose_time, "check_setup", None)
        if check_setup is not None:
            check_setup(criterion_cfg, MODELS.get(cfg.model.adapter).compose_time,
                        getattr(TASKS.get(cfg.task).compose_time, "kind", None))
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None
    try:
        engine = ENGINES.get(cfg.engine).compose_time
    except KeyError as error:  # the message lists the registered engines
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
    if getattr(CRITERIONS.get(cfg.criterion.name).compose_time, "needs_init_from", False) and not cfg.init_from:
        raise ConfigError(f"criterion {cfg.criterion.name} trains on a fine-tuned model: set init_from=RUN_DIR "
                          "(a finished run's directory) or init_from=HF_MODEL_FOLDER")


def _without(node: DictConfig, *keys: str) -> dict:
    values = OmegaConf.to_container(node, resolve=True)
    return {k: v for k, v in values.items() if k not in keys}


def criterion_config(cfg: DictConfig):
    entry = CRITERIONS.get(cfg.criterion.name)
    return entry.config_cls(**_without(cfg.criterion, "name")) if entry.config_cls else None


def model_config(cfg: DictConfig) -> ModelConfig:
    return MODELS.get(cfg.model.adapter).config_cls(**_without(cfg.model, "name", "adapter"))


def data_config(cfg: DictConfig) -> DataConfig:
    return TASKS.get(cfg.task).config_cls(**OmegaConf.to_container(cfg.data, resolve=True))


def declared_keys() -> dict[str, list[tuple[type, str, str]]]:
    """Every dotted key a run config declares -> the (dataclass, field, note) declaring it; a criterion key is
    declared by each criterion having it (the note names the criterion)."""
    sections: list[tuple[str, type, str]] = [("", RunConfig, ""), ("optim.", OptimConfig, ""),
                                             ("data.", DataConfig, ""), ("model.", ModelConfig, ""),
                                             ("model.lora.", LoraSettings, "")]
    sections += [("criterion.", CRITERIONS.get(name).config_cls, f" (criterion {name})") for name in CRITERIONS.names()
                 if CRITERIONS.get(name).config_cls is not None]
    keys: dict[str, list[tuple[type, str, str]]] = {}
    for prefix, cls, note in sections:
        for name in declared(cls):
            keys.setdefault(f"{prefix}{name}", []).append((cls, name, note))
    return keys


def describe_key(key: str) -> str:
    """``istar-run --help KEY``: the key's type, default, help and allowed values; an unknown key is a
    :class:`ConfigError` naming close matches.

    >>> print(describe_key("optim.lr"))
    optim.lr: float = 2e-05
      peak learning rate (AdamW)
      allowed: > 0
    >>> describe_key("optim.lrr")
    Traceback (most recent call last):
    ...
    istar_plugin.errors.ConfigError: unknown key 'optim.lrr'; close matches: optim.lr
    """
    keys = declared_keys()
    if key not in keys:
        close = difflib.get_close_matches(key, keys, n=3, cutoff=0.8)
        raise ConfigError(f"unknown key {key!r}; " + (f"close matches: {', '.join(close)}" if close else
                                                       "istar-run --cfg prints every key"))
    return "\n".join(describe(cls, name, key + note) for cls, name, note in keys[key])


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)
