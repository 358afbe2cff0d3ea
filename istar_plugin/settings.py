"""Config keys declared once: :func:`setting` gives a dataclass field its default, help, allowed choices or range
(``Optional[...]``: null is allowed), and :func:`refusal`, the one validator, checks values against them.

>>> @dataclass
... class Optim:
...     epochs: Optional[int] = setting(None, help="passes over the data", low=1)
>>> refusal(Optim, {"epochs": 0}, "optim.")
'optim.epochs=0 is out of range; allowed: >= 1 or null'
"""
from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence


def shortened(text: str, limit: int = 60) -> str:
    """``text``, or its start and end with its length when it is longer than ``limit`` characters."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    return f"{text[:limit - tail]}...{text[-tail:]} ({len(text)} characters)"


@dataclass(frozen=True)
class Declared:
    """What a key allows and means: its help, choices, numeric range and refusal wording."""

    help: str
    choices: Optional[tuple] = None
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    refused: Optional[str] = None
    added: bool = False  # added after runs were written without it; its default (or ``before``) does what they did
    before: Any = None  # with ``changed``: the value runs written without the key computed with, its default since
    changed: bool = False

    def allowed(self, nullable: bool) -> str:
        """The allowed values in words."""
        if self.choices is not None:
            text = ", ".join(map(as_written, self.choices))
        elif self.low is not None and self.high is not None:
            if self.low_open or self.high_open:
                text = f"{self.low} {'<' if self.low_open else '<='} x {'<' if self.high_open else '<='} {self.high}"
            else:
                text = f"{self.low} to {self.high}"
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {self.low}"
        elif self.high is not None:
            text = f"{'<' if self.high_open else '<='} {self.high}"
        else:
            return "null" if nullable else "any"
        return f"{text} or null" if nullable else text

    def accepts(self, value: Any, kind: Any) -> bool:
        if self.choices is not None:
            return value in self.choices
        if self.low is None and self.high is None:
            return True
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or (kind is int and not isinstance(value, int)):
            return False
        if self.low is not None and not (value > self.low if self.low_open else value >= self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def message(self, key: str, value: Any, nullable: bool) -> str:
        choices = ", ".join(map(str, self.choices or ()))
        if self.refused is not None:
            return self.refused.format(key=key, value=_Shown(value), choices=choices)
        if self.choices is not None:
            return f"{key} {shortened(repr(value))} unknown; choose one of: {choices}"
        return f"{key}={shortened(str(value))} is out of range; allowed: {self.allowed(nullable)}"


class _Shown:
    """A value as a refusal template shows it (``{value}``, ``{value!r}``), shortened when long."""

    def __init__(self, value: Any):
        self.value = value

    def __str__(self) -> str:
        return shortened(str(self.value))

    def __repr__(self) -> str:
        return shortened(repr(self.value))


def setting(default: Any = dataclasses.MISSING, *, help: str, default_factory: Any = dataclasses.MISSING,
            choices: Optional[Sequence] = None, low: Optional[float] = None, high: Optional[float] = None,
            low_open: bool = False, high_open: bool = False, refused: Optional[str] = None, added: bool = False,
            before: Any = dataclasses.MISSING) -> Any:
    """A dataclass field declaring one config key (fairseq's ``field(metadata=...)``); see :class:`Declared`.
    ``added``: runs written before the key did what its default does; ``before=VALUE``: they did what VALUE does."""
    changed = before is not dataclasses.MISSING
    declaration = Declared(help, tuple(choices) if choices is not None else None, low, high, low_open, high_open,
                           refused, added or changed, before if changed else None, changed)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"declared": declaration})


@functools.lru_cache(maxsize=None)
def declared(cls: type) -> dict[str, tuple[dataclasses.Field, Declared, Any]]:
    """Each declared field of the dataclass ``cls``: (field, declaration, resolved annotation)."""
    hints = typing.get_type_hints(cls)
    return {field.name: (field, field.metadata["declared"], hints[field.name])
            for field in dataclasses.fields(cls) if "declared" in field.metadata}


def default_of(field: dataclasses.Field) -> Any:
    """The value a dataclass field takes when none is given (its ``default_factory()`` called afresh)."""
    return field.default if field.default is not dataclasses.MISSING else field.default_factory()


def as_written(value: Any) -> str:
    """A value as a command line or YAML file writes it (``true``, not ``True``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _nullable(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def _kind(annotation: Any) -> Any:
    arguments = [argument for argument in typing.get_args(annotation) if argument is not type(None)]
    return arguments[0] if _nullable(annotation) and len(arguments) == 1 else annotation


def refusal(cls: type, values: Mapping[str, Any], prefix: str = "") -> Optional[str]:
    """The first declared key of ``cls`` whose value in ``values`` is not allowed, as a one-line message; else None."""
    for name, (_, declaration, annotation) in declared(cls).items():
        if name not in values:
            continue
        value = values[name]
        if value is None and _nullable(annotation):
            continue
        finite = not isinstance(value, float) or math.isfinite(value)
        if value is None or not finite or not declaration.accepts(value, _kind(annotation)):
            return declaration.message(f"{prefix}{name}", value, _nullable(annotation))
    return None


def check_fields(instance: Any, prefix: str, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` with :func:`refusal`'s message for the first declared field of ``instance`` not allowed."""
    if (problem := refusal(type(instance), vars(instance), prefix)) is not None:
        raise error(problem)


def describe(cls: type, name: str, key: Optional[str] = None) -> str:
    """The key ``name`` of ``cls`` (shown as ``key``): type, default, help and allowed values, one item a line."""
    field, declaration, annotation = declared(cls)[name]
    default = default_of(field)
    kinds = [kind for kind in typing.get_args(_kind(annotation)) or [_kind(annotation)] if kind is not type(None)]
    kind = " or ".join(getattr(kind, "__name__", str(kind)) for kind in kinds)
    null = " or null" if _nullable(annotation) else ""
    shown = as_written(default) if isinstance(default, bool) else repr(default)
    lines = [f"{key or name}: {kind}{null} = {shown}", f"  {declaration.help}"]
    if (allowed := declaration.allowed(False)) != "any":
        lines.append(f"  allowed: {allowed}{null}")
    return "\n".join(lines)


def added_keys(cls: type, prefix: str = "") -> dict[str, Any]:
    """The keys of ``cls`` (nested too) marked ``added``, each with the value that does what runs without it did."""
    found = {}
    for name, (field, declaration, _) in declared(cls).items():
        default = default_of(field)
        if declaration.added:
            found[f"{prefix}{name}"] = declaration.before if declaration.changed else default
        if dataclasses.is_dataclass(default):
            found.update(added_keys(type(default), f"{prefix}{name}."))
    return found
