"""What ``istar-run --help KEY`` prints: every dotted key a run config declares (:func:`declared_keys`) and one
key's type, default, help and allowed values (:func:`describe_key`).

>>> print(describe_key("optim.lr"))
optim.lr: float = 2e-05
  peak learning rate (AdamW)
  allowed: > 0
"""
from __future__ import annotations

import difflib

from ..data.config import DataConfig
from ..errors import ConfigError
from ..models.config import LoraSettings, ModelConfig
from ..registry import CRITERIONS
from ..settings import declared, describe
from .schema import OptimConfig, RunConfig


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
