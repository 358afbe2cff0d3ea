"""Command-line overrides as text: ``key=value`` arguments split, and YAML values written as the command line takes
them (grid files and search files both turn their mappings into overrides).

>>> key_value_pairs(["recipe=sst2", "optim.lr=1e-4"])
[('recipe', 'sst2'), ('optim.lr', '1e-4')]
>>> [format_value(v) for v in (0.2, -5, True, None, [1, 2])]
['0.2', '-5', 'true', 'null', '[1,2]']
>>> format_value({"a": 1}, "a swept value")
Traceback (most recent call last):
...
istar_plugin.errors.ConfigError: a swept value must be a scalar or a list, got the mapping {'a': 1}
"""
from __future__ import annotations

from typing import Any, Sequence

from omegaconf import DictConfig, ListConfig

from ..errors import ConfigError


def key_value_pairs(arguments: Sequence[str], where: str = "", refusal: type[ConfigError] = ConfigError
                    ) -> list[tuple[str, str]]:
    """``(key, value)`` of each ``key=value`` argument; another form is one ``refusal`` line (``where``: its source)."""
    pairs = []
    for argument in arguments:
        key, sep, value = argument.partition("=")
        if not sep or not key:
            raise refusal(f"{where + ': ' if where else ''}argument {argument!r} is not of the form key=value")
        pairs.append((key, value))
    return pairs


def format_value(value: Any, what: str = "a value", refusal: type[ConfigError] = ConfigError) -> str:
    """A YAML value as it is written on the command line; a mapping (no command-line form) is one ``refusal`` line
    naming ``what`` it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple, ListConfig)):
        return "[" + ",".join(format_value(v, what, refusal) for v in value) + "]"
    if isinstance(value, (dict, DictConfig)):
        raise refusal(f"{what} must be a scalar or a list, got the mapping {value!r}")
    return str(value)
