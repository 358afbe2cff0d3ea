"""Typed registries: a name maps to a class and its config dataclass, declared in one decorator. Packages (the
built-ins too) add entries through entry points (group ``istar_plugin.<kind>s``); a class whose module imports torch
is *declared* as ``"module:Class"``, imported on first use, and composing reads its :func:`outline` meanwhile.

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

import ast
import dataclasses
import functools
import importlib.util
import pkgutil
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Entry:
    """A registered name: its class (or ``"module:attr"``, imported on first use), config dataclass and stand-in."""

    name: str
    target: Any
    config_cls: type | None
    declared: Any = None

    @property
    def cls(self) -> Any:
        return pkgutil.resolve_name(self.target) if isinstance(self.target, str) else self.target

    @property
    def compose_time(self) -> Any:
        """What composing reads: the declared stand-in, else the class if its module is imported, else its outline."""
        if self.declared is not None:
            return self.declared
        if isinstance(self.target, str) and self.target.partition(":")[0] not in sys.modules:
            return outline(self.target)
        return self.cls


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
        """Register ``"module:Class"`` under ``name`` unimported; ``declared`` (else its :func:`outline`) stands in."""
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


def _declared_method(*args: Any, **kwargs: Any) -> None:
    raise TypeError("an outline's method is a declaration: import the class to call it")


@functools.lru_cache(maxsize=None)
def outline(target: str) -> type:
    """A stand-in for ``"module:Class"`` from its source: the public methods it and its package base classes define."""
    module, _, name = target.partition(":")
    methods: dict[str, Any] = {}
    pending = [(module, name)]
    while pending:
        module, name = pending.pop()
        source = importlib.util.find_spec(module)  # imports the parent packages only
        if source is None or not str(source.origin).endswith(".py"):
            continue
        tree = ast.parse(Path(source.origin).read_text(encoding="utf-8"))
        origins = {alias.asname or alias.name: (importlib.util.resolve_name("." * node.level + (node.module or ""),
                                                                             source.parent), alias.name)
                   for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}
        for node in (node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_"):
                    methods.setdefault(item.name, _declared_method)
            for base in node.bases:
                origin = origins.get(base.id, (module, base.id)) if isinstance(base, ast.Name) else ("", "")
                if origin[0].startswith("istar_plugin"):
                    pending.append(origin)
    return type(target.partition(":")[2], (), methods)


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
    """Import every entry point of the ``istar_plugin.<kind>s`` groups (once per process); return their names."""
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
