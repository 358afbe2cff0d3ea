"""What ``istar-run --help KEY`` prints: every dotted key a run config declares, and one key's type, default, help
and allowed values (a group's or a key a group sets: its choices).

>>> print(describe_key("optim.lr"))
optim.lr: float = 2e-05
  peak learning rate (AdamW)
  allowed: > 0
"""
from __future__ import annotations

import difflib
from typing import Callable

from ..data.config import DataConfig
from ..errors import ConfigError
from ..models.config import LoraSettings, ModelConfig
from ..registry import CRITERIONS, MODELS
from ..settings import declared, describe
from .recipes import available
from .schema import DEFAULT_ADAPTER, DEFAULT_CRITERION, DEFAULT_MODEL, OptimConfig, RunConfig


def declared_keys() -> dict[str, list[tuple[type, str, str]]]:
    """Every dotted key a run config declares -> the (dataclass, field, note naming a criterion) declaring it."""
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


def model_choices() -> list[str]:
    """What ``model=`` takes: the model presets (``recipes/model/NAME.yaml``), then the registered adapters."""
    return [f"{name} (preset)" for name in available("model")] + [f"{name} (adapter)" for name in MODELS.names()]


CHOSEN_BY_NAME: dict[str, tuple[str, str, Callable[[], list[str]]]] = {
    "recipe": ("recipe=NAME (default: none, the declared defaults alone)", declared(RunConfig)["recipe"][1].help,
               available),
    "criterion": (f"criterion=NAME (default: the recipe's defaults.criterion, else {DEFAULT_CRITERION})",
                  declared(RunConfig)["criterion"][1].help, CRITERIONS.names),
    "model": (f"model=NAME (default: the recipe's defaults.model, else {DEFAULT_MODEL})",
              declared(RunConfig)["model"][1].help, model_choices),
    "criterion.name": ("criterion.name: str (set by criterion=NAME)",
                       "the criterion chosen with criterion=NAME; its settings are criterion.*", CRITERIONS.names),
    "model.name": ("model.name: str (set by model=NAME)",
                   "the model chosen with model=NAME: a preset or a registered adapter", model_choices),
    "model.adapter": ("model.adapter: str (set by model=NAME)", "the registered class building the model: a preset's "
                      f"adapter (else {DEFAULT_ADAPTER}), or NAME when model=NAME is one", MODELS.names),
}
"""The groups and the keys composing sets from them, declared by no dataclass: (first line, meaning, choices)."""


def describe_key(key: str) -> str:
    """``istar-run --help KEY``; an unknown key is a :class:`ConfigError` naming close matches."""
    if key in CHOSEN_BY_NAME:
        first, meaning, choices = CHOSEN_BY_NAME[key]
        return "\n".join([first, f"  {meaning}", f"  choices: {', '.join(choices())}"])
    keys = declared_keys()
    if key not in keys:
        close = difflib.get_close_matches(key, [*keys, *CHOSEN_BY_NAME], n=3, cutoff=0.8)
        raise ConfigError(f"unknown key {key!r}; " + (f"close matches: {', '.join(close)}" if close else
                                                       "istar-run --cfg prints every key"))
    return "\n".join(describe(cls, name, key + note) for cls, name, note in keys[key])
