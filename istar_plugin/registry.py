"""Typed registries: a name maps to a class and its config dataclass, declared in one decorator.

Packages add entries through installed-package entry points (group ``istar_plugin.<kind>s``, e.g.
``istar_plugin.criterions``), loaded by :func:`load_plugins` the first time a registry is asked for a name.
The built-ins are registered the same way (this project's own entry points name ``istar_plugin.criterions``,
``istar_plugin.models.encoder`` and ``istar_plugin.data.tasks``): importing a package registers what it defines.

>>> from dataclasses import dataclass
>>> widgets = Registry("widget")
>>> @dataclass
... class SquareConfig:
...     side: float = 1.0
>>> @widgets.register("square", SquareConfig)
... class Square:
...     def __init__(self, cfg): self.area = cfg.side ** 2
>>> widgets.build("square", SquareConfig(side=3.0)).area
9.0
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable


@dataclass(frozen=True)
class Entry:
    """A registered name: the class (or factory) and the dataclass that configures it."""

    name: str
    cls: Any
    config_cls: type | None


class Registry:
    """Name -> (class, config dataclass). Duplicate names are rejected; re-registering the same class is harmless."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    @property
    def entry_point_group(self) -> str:
        return f"istar_plugin.{self.kind}s"

    def register(self, name: str, config_cls: type | None = None) -> Callable[[Any], Any]:
        if config_cls is not None and not dataclasses.is_dataclass(config_cls):
            raise TypeError(f"{self.kind} {name!r}: config class {config_cls!r} is not a dataclass")

        def decorator(cls: Any) -> Any:
            existing = self._entries.get(name)
            if existing is not None and _qualname(existing.cls) != _qualname(cls):
                raise ValueError(
                    f"duplicate {self.kind} name {name!r}: already registered by {_qualname(existing.cls)}, "
                    f"cannot register {_qualname(cls)}"
                )
            self._entries[name] = Entry(name, cls, config_cls)
            return cls

        return decorator

    def get(self, name: str) -> Entry:
        if name not in self._entries:
            load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            if not self._entries:  # not even the built-ins: their entry points are missing from the installed metadata
                raise KeyError(f"unknown {self.kind} {name!r}: no {self.kind}s are registered, not even the built-in ones, "
                               f"because the installed istar_plugin has no entry points in group {self.entry_point_group}; "
                               "install it again (pip install -e . in a source checkout)") from None
            known = ", ".join(sorted(self._entries))
            raise KeyError(f"unknown {self.kind} {name!r}; registered {self.kind}s: {known}") from None

    def build(self, name: str, cfg: Any = None, *args: Any, **kwargs: Any) -> Any:
        entry = self.get(name)
        if entry.config_cls is None:
            return entry.cls(*args, **kwargs)
        return entry.cls(cfg if cfg is not None else entry.config_cls(), *args, **kwargs)

    def names(self) -> list[str]:
        load_plugins()
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        if name not in self._entries:
            load_plugins()
        return name in self._entries

    def __len__(self) -> int:
        load_plugins()
        return len(self._entries)


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


CRITERIONS = Registry("criterion")
MODELS = Registry("model")
TASKS = Registry("task")
ENGINES = Registry("engine")
"""What trains a run: ``istar`` (the toolkit's own trainer) or another loop with the same surface, e.g.
``sentence_transformers``: ``Engine(cfg, hooks=())``, ``.fit()`` returning the results record as a dict,
``.output_dir`` and ``.is_main``; an optional ``check_config(cfg)`` classmethod refuses what it cannot run."""
REGISTRIES = {"criterions": CRITERIONS, "models": MODELS, "tasks": TASKS, "engines": ENGINES}


_loaded: list[str] = []
_loading = False


def load_plugins() -> tuple[str, ...]:
    """Import every installed entry point of the ``istar_plugin.<kind>s`` groups (once per process); return their names.

    Loading an entry point imports its module, whose decorators register the plugin's classes. A lookup made
    while the plugins load (a plugin's module asking a registry) sees what has registered so far.
    """
    global _loading
    if _loaded or _loading:
        return tuple(_loaded)
    _loading = True
    try:
        names = []
        for registry in REGISTRIES.values():
            for entry_point in metadata.entry_points(group=registry.entry_point_group):
                entry_point.load()
                names.append(f"{registry.entry_point_group}:{entry_point.name}")
        _loaded.extend(names)
    finally:
        _loading = False
    return tuple(_loaded)
