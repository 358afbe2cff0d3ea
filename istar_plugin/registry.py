"""Typed registries: a name maps to a class and its config dataclass, declared in one decorator.

Packages add entries through installed-package entry points (group ``istar_plugin.<kind>s``, e.g.
``istar_plugin.criterions``), loaded by :func:`load_plugins` the first time a registry is asked for a name.
The built-ins are registered the same way (this project's own entry points name ``istar_plugin.criterions``,
``istar_plugin.models``, ``istar_plugin.data.tasks`` and the engines' ``engine_setup`` modules): importing one
registers what it defines. The built-in classes are *declared* (:meth:`Registry.declare`: ``"module:Class"``, loaded
on first use, with a torch-free stand-in for what composing a config asks), so listing names and composing a config
import no training framework.

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
import importlib
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable


@dataclass(frozen=True)
class Entry:
    """A registered name: the class (or factory) and the dataclass that configures it.

    ``target`` is the class, or ``"module:attr"`` for a class imported the first time :attr:`cls` is asked for
    (the built-ins: composing a config must not import torch). ``declared`` is what composing reads instead of the
    class (``check_setup``, ``needs_init_from``, ``check_config``, ...), when the class is not loaded yet.

    >>> entry = Entry("ordered", "collections:OrderedDict", None)
    >>> entry.cls.__name__, entry.compose_time is entry.cls
    ('OrderedDict', True)
    """

    name: str
    target: Any
    config_cls: type | None
    declared: Any = None

    @property
    def cls(self) -> Any:
        if isinstance(self.target, str):
            module, _, attribute = self.target.partition(":")
            return getattr(importlib.import_module(module), attribute)
        return self.target

    @property
    def compose_time(self) -> Any:
        """The torch-free stand-in declared for the class, else the class itself."""
        return self.declared if self.declared is not None else self.cls


class Registry:
    """Name -> (class, config dataclass). Duplicate names are rejected; re-registering the same class is harmless."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    @property
    def entry_point_group(self) -> str:
        return f"istar_plugin.{self.kind}s"

    def register(self, name: str, config_cls: type | None = None) -> Callable[[Any], Any]:
        _check_config_cls(self.kind, name, config_cls)

        def decorator(cls: Any) -> Any:
            self._put(name, cls, config_cls, None)
            return cls

        return decorator

    def declare(self, name: str, target: str, config_cls: type | None = None, declared: Any = None) -> None:
        """Register ``target`` (``"module:Class"``) under ``name`` without importing it; ``declared`` answers for the
        class at compose time. The class's own ``@register`` (when its module is imported) keeps both.

        >>> shapes = Registry("shape")
        >>> shapes.declare("ordered", "collections:OrderedDict")
        >>> shapes.get("ordered").cls.__name__
        'OrderedDict'
        """
        _check_config_cls(self.kind, name, config_cls)
        self._put(name, target, config_cls, declared)

    def _put(self, name: str, target: Any, config_cls: type | None, declared: Any) -> None:
        existing = self._entries.get(name)
        if existing is None:
            self._entries[name] = Entry(name, target, config_cls, declared)
            return
        if _qualname(existing.target) != _qualname(target):
            raise ValueError(f"duplicate {self.kind} name {name!r}: already registered by "
                             f"{_qualname(existing.target)}, cannot register {_qualname(target)}")
        loaded = target if isinstance(existing.target, str) else existing.target  # a loaded class stays loaded
        self._entries[name] = Entry(name, loaded, config_cls or existing.config_cls, declared or existing.declared)

    def get(self, name: str) -> Entry:
        if name not in self._entries:
            load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            if not self._entries:  # not even the built-ins: their entry points are missing from the installed metadata
                raise KeyError(f"unknown {self.kind} {name!r}: no {self.kind}s are registered, not even the built-in "
                               f"ones, because the installed istar_plugin has no entry points in group "
                               f"{self.entry_point_group}; install it again (pip install -e . in a source "
                               "checkout)") from None
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
    if isinstance(obj, str):  # "module:attr", a declared target
        return obj.replace(":", ".")
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _check_config_cls(kind: str, name: str, config_cls: type | None) -> None:
    if config_cls is not None and not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"{kind} {name!r}: config class {config_cls!r} is not a dataclass")


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
