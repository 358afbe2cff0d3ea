"""Composing a run config from command-line style arguments: the declared defaults, the recipe, the model preset,
the recipe's tuned criterion parameters for that model, then the dotted overrides, validated before anything loads;
besides OmegaConf's own interpolations, ``${cell:LABEL,VALUE,...}`` (a sibling grid cell's run directory) and
``${for_task:TASK,VALUE,...}`` (one value per task).

>>> register_resolvers()
>>> OmegaConf.create({"task": "rte", "zeta": "${for_task:rte,0.8,mrpc,0.6}"}).zeta
0.8
>>> OmegaConf.create({"output_dir": "/g/recipe=rte,criterion=isolayer", "x": "${cell:criterion,cross_entropy}"}).x
'/g/recipe=rte,criterion=cross_entropy'
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigKeyError, InterpolationResolutionError, OmegaConfBaseException

from ..data.task import Task
from ..errors import ConfigError, ModelError
from ..models.config import ModelConfig
from ..models.preflight import check_model_limits, model_shape
from ..registry import CRITERIONS, MODELS, TASKS
from ..settings import shortened
from ..storage.user_paths import check_path_length, expand_home
from .overrides import pairs as override_pairs
from .recipes import available, find_yaml, load_yaml
from .schema import DEFAULT_ADAPTER, DEFAULT_CRITERION, DEFAULT_MODEL, FILE_KEYS, GROUPS, PATH_KEYS, RunConfig
from .validate import validate
from .views import data_config

LAYER_INDEX_HIGH = 1024


def sibling_cell(*changes, _root_) -> str:
    """``${cell:LABEL,VALUE,...}``: the run directory of the sibling grid cell with each LABEL set to VALUE."""
    run_dir = Path(str(_root_.output_dir))
    parts = [part.partition("=") for part in run_dir.name.split(",")]
    if not all(sep for _, sep, _ in parts):
        raise ConfigError(f"${{cell:...}} names a sibling grid cell, but output_dir {run_dir} is not a grid cell's "
                          "directory (label=value,...)")
    named = {label: value for label, _, value in parts}
    labels, values = changes[::2], changes[1::2]
    if len(labels) != len(values) or not set(map(str, labels)) <= set(named):
        raise ConfigError(f"${{cell:{','.join(map(str, changes))}}}: expected LABEL,VALUE pairs with LABEL one of "
                          f"this cell's ({', '.join(named)})")
    named.update({str(label): str(value) for label, value in zip(labels, values)})
    return str(run_dir.parent / ",".join(f"{label}={value}" for label, value in named.items()))


def value_for_task(*pairs, _root_) -> Any:
    """``${for_task:TASK,VALUE,...}``: the VALUE paired with this run's ``task``."""
    tasks, values = [str(task) for task in pairs[::2]], pairs[1::2]
    if not tasks or len(tasks) != len(values):
        raise ConfigError(f"${{for_task:{','.join(map(str, pairs))}}}: expected TASK,VALUE pairs")
    if str(_root_.task) not in tasks:
        raise ConfigError(f"${{for_task:...}} has no value for task {_root_.task!r}; it gives: {', '.join(tasks)}")
    return values[tasks.index(str(_root_.task))]


def register_resolvers() -> None:
    """Make ``${cell:...}`` and ``${for_task:...}`` resolvable (registering again replaces them)."""
    OmegaConf.register_resolver("cell", sibling_cell, replace=True, annotation_validation="off")
    OmegaConf.register_resolver("for_task", value_for_task, replace=True)


def _merge(base: DictConfig, update: Any, where: str) -> DictConfig:
    try:
        return OmegaConf.merge(base, update)
    except OmegaConfBaseException as error:
        key = str(getattr(error, "full_key", None) or getattr(error, "key", "?"))
        if not isinstance(error, ConfigKeyError):
            raise ConfigError(f"{where}: bad value for {key!r}: {error.msg}") from None
        parent = key.rpartition(".")[0]
        node = OmegaConf.select(base, parent) if parent else base
        allowed = ", ".join(sorted(node.keys())) if isinstance(node, DictConfig) else "(none)"
        raise ConfigError(f"{where}: unknown key {key!r}; allowed: {allowed}") from None


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
        adapter = values.pop("adapter", DEFAULT_ADAPTER)
        node = _merge(node, values, f"model preset {preset}")
    elif name in MODELS:
        adapter = name
    else:
        raise ConfigError(f"unknown model {name!r}; presets: {', '.join(available('model')) or '(none)'}; "
                          f"registered adapters: {', '.join(MODELS.names())}")
    MODELS.get(adapter)
    with open_dict(node):
        node.name, node.adapter = name, adapter
    return node


def _layer_ranges(overrides: list[str]) -> tuple[list[str], Optional[str]]:
    """``criterion.layers=START:STOP`` as a list; a range past :data:`LAYER_INDEX_HIGH` is left out and returned."""
    result, unbounded = [], None
    for override in overrides:
        key, _, value = override.partition("=")
        start, colon, stop = value.partition(":")
        if key == "criterion.layers" and colon:
            if not (start.isdigit() and stop.isdigit() and int(start) < int(stop)):
                raise ConfigError(f"criterion.layers={shortened(value)} is not a range START:STOP of layers with "
                                  "START < STOP (e.g. 8:22, the layers 8 to 21), nor a list such as [3,6]")
            if int(stop) - 1 > LAYER_INDEX_HIGH:
                unbounded = value
                continue
            override = f"{key}=[{','.join(str(i) for i in range(int(start), int(stop)))}]"
        result.append(override)
    return result, unbounded


def _refuse_layer_range(cfg: DictConfig, value: str) -> None:
    """Refuse ``criterion.layers=value`` against the model's layers when its config is here, else that bound."""
    try:
        shape = model_shape(cfg, local_only=True)
    except ModelError:
        shape = None
    last = int(value.partition(":")[2]) - 1
    if shape is None:
        raise ConfigError(f"criterion.layers={shortened(value)} reaches hidden state {shortened(str(last))}; allowed: "
                          f"indices 0 to {LAYER_INDEX_HIGH} at most (no model has more layers), within the model's")
    layers = shape[1]
    raise ConfigError(f"criterion.layers={shortened(value)} reaches hidden state {shortened(str(last))}, out of range "
                      f"for model {cfg.model.name_or_path} with {layers} layers; allowed: 0 (embeddings) to {layers}")


def _dotlist(overrides: list[str]) -> DictConfig:
    """The overrides as a config; a value YAML cannot read is one line naming its key."""
    try:
        return OmegaConf.from_dotlist(overrides)
    except (yaml.YAMLError, OmegaConfBaseException):
        for override in overrides:
            try:
                OmegaConf.from_dotlist([override])
            except (yaml.YAMLError, OmegaConfBaseException) as error:
                key, _, value = override.partition("=")
                limit = re.search(r"exceeds the configured limit of (\d+)", str(error))
                reason = (f"it holds more than the {limit[1]} items a value may have (OmegaConf's YAML node limit)"
                          if limit else f"cannot be read: {shortened(' '.join(str(error).split()), 200)}")
                raise ConfigError(f"{key}={shortened(value)}: {reason}") from None
        raise


def _check_source(cfg: DictConfig, chosen: set[str]) -> None:
    """Refuse a ``data.source`` the task cannot be read from, before anything loads; when neither the recipe nor
    the command line chose it (``chosen``: the keys they set), say what to give."""
    task_class = TASKS.get(cfg.task).compose_time
    if not (isinstance(task_class, type) and issubclass(task_class, Task)):
        return  # a plugin's task whose module is not imported yet: its load checks the source
    task = task_class(data_config(cfg))
    try:
        task.check_source()
    except ConfigError as error:
        if "data.source" in chosen or not task.sources:
            raise
        source, fitting = f"data.source={cfg.data.source}", f"data.source={task.sources[0]}"
        if "task" in chosen:
            raise ConfigError(f"{error}. {source} is the declared default (no recipe or argument set it): give "
                              f"{fitting}") from None
        recipe = f", e.g. recipe={cfg.task}" if find_yaml(cfg.task) is not None else ""
        raise ConfigError(f"{error}. task={cfg.task} and {source} are the declared defaults (no recipe or argument "
                          f"set them): give a recipe{recipe} (istar-run --list recipes), or {fitting}") from None


def compose(arguments: list[str]) -> DictConfig:
    """Build the resolved, read-only run config from command-line style arguments."""
    register_resolvers()
    pairs = override_pairs(arguments)
    groups = {key: value for key, value in pairs if key in GROUPS}  # group=option choices, then key.sub=value
    overrides = [f"{key}={value}" for key, value in pairs if key not in GROUPS]
    if {key for key, _ in pairs} & set(FILE_KEYS) and "data.source" not in dict(pairs):  # data.source=files implied
        overrides.append("data.source=files")
    cfg = OmegaConf.structured(RunConfig)
    recipe: DictConfig = OmegaConf.create({})
    if "recipe" in groups:
        check_path_length(expand_home(groups["recipe"], "recipe="), "recipe=")
        path = find_yaml(expand_home(groups["recipe"], "recipe="))
        if path is None:
            raise ConfigError(f"unknown recipe {groups['recipe']!r}; available: {', '.join(available()) or '(none)'}")
        recipe = load_yaml(path, "recipe")
        with open_dict(recipe):
            recipe.recipe = groups["recipe"]
    defaults, tuned = recipe.pop("defaults", {}), recipe.pop("tuned", {})
    criterion_name = groups.get("criterion") or defaults.get("criterion", DEFAULT_CRITERION)
    model_name = groups.get("model") or defaults.get("model", DEFAULT_MODEL)
    try:
        with open_dict(cfg):
            cfg.model = _model_node(model_name)
            cfg.criterion = _criterion_node(criterion_name, dict(tuned.get(criterion_name, {}).get(model_name, {})))
    except KeyError as error:  # an unknown criterion or model adapter, as the registry words it
        raise ConfigError(error.args[0]) from None
    cfg = _merge(cfg, recipe, f"recipe {groups.get('recipe')}")
    overrides, unbounded_layers = _layer_ranges(overrides)
    cfg = _merge(cfg, _dotlist(overrides), "command line")
    if unbounded_layers is not None:
        _refuse_layer_range(cfg, unbounded_layers)
    if cfg.task not in TASKS:
        raise ConfigError(f"unknown task {cfg.task!r}; registered tasks: {', '.join(TASKS.names())}")
    chosen = {key for key, _ in pairs} | {override.partition("=")[0] for override in overrides}
    chosen |= {"task"} & set(recipe) | {f"data.{key}" for key in recipe.get("data") or {}}
    try:
        validate(cfg)
        OmegaConf.resolve(cfg)
    except InterpolationResolutionError as error:
        if isinstance(error.__cause__, ConfigError):
            raise error.__cause__ from None
        raise ConfigError(f"{error.full_key}: {' '.join(str(error).split())}") from None
    for key in PATH_KEYS:  # a leading ~ or ~user expanded, once resolved
        if isinstance(value := OmegaConf.select(cfg, key), str):
            OmegaConf.update(cfg, key, expand_home(value, f"{key}="), merge=False)
            check_path_length(OmegaConf.select(cfg, key), f"{key}=")
    _check_source(cfg, chosen)
    check_model_limits(cfg, lenient=True, kind=getattr(TASKS.get(cfg.task).compose_time, "kind", None))
    OmegaConf.set_readonly(cfg, True)
    return cfg
