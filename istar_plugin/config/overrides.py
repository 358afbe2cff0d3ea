"""The one override format of run composition, grid files and search files: ``key=value`` arguments, YAML mappings
written as such arguments, and one merge in which a later override of a key replaces an earlier one.

>>> pairs(["recipe=sst2", "optim.lr=1e-4"])
[('recipe', 'sst2'), ('optim.lr', '1e-4')]
>>> from_mapping({"criterion": "istar", "criterion.layers": [3, 6], "data.dir": None})
[('criterion', 'istar'), ('criterion.layers', '[3,6]'), ('data.dir', 'null')]
>>> merge([("recipe", "rte"), ("optim.lr", "1e-4")], [("seed", "2"), ("optim.lr", "3e-5")])
[('recipe', 'rte'), ('optim.lr', '3e-5'), ('seed', '2')]
>>> arguments(_)
['recipe=rte', 'optim.lr=3e-5', 'seed=2']
"""
from __future__ import annotations

import itertools
from typing import Any, Iterable, Sequence

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..errors import ConfigError

Pairs = list[tuple[str, str]]


def pairs(arguments: Sequence[str], where: str = "", refusal: type[ConfigError] = ConfigError) -> Pairs:
    """``(key, value)`` of each ``key=value`` argument; another form is one ``refusal`` line (``where``: its source)."""
    result = []
    for argument in arguments:
        key, sep, value = argument.partition("=")
        if not sep or not key:
            raise refusal(f"{where + ': ' if where else ''}argument {argument!r} is not of the form key=value")
        result.append((key, value))
    return result


def format_value(value: Any, what: str = "a value", refusal: type[ConfigError] = ConfigError) -> str:
    """A YAML value as it is written on the command line; a mapping is one ``refusal`` line naming ``what`` it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple, ListConfig)):
        return "[" + ",".join(format_value(v, what, refusal) for v in value) + "]"
    if isinstance(value, (dict, DictConfig)):
        raise refusal(f"{what} must be a scalar or a list, got the mapping {value!r}")
    return str(value)


def read_value(value: str) -> Any:
    """An override's value as run composition reads it (YAML through ``OmegaConf.from_dotlist``: ``1.0`` a number,
    ``True`` true, ``~`` null, ``[1, 2]`` a list); a value YAML cannot read, as its text (composition refuses it).

    >>> [read_value(v) for v in ("-5", "1e-3", "True", "null", "[1, 2]", "${seed}")]
    [-5, 0.001, True, None, [1, 2], '${seed}']
    """
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist([f"value={value}"]))["value"]
    except (yaml.YAMLError, OmegaConfBaseException):
        return value


def from_mapping(node: Any, where: str = "overrides", refusal: type[ConfigError] = ConfigError,
                 what: str = "a run override's value") -> Pairs:
    """A YAML mapping of run keys to values as ``(key, value)`` overrides; interpolations stay unresolved."""
    if node is None:
        return []
    if not isinstance(node, (dict, DictConfig)):
        raise refusal(f"{where} must be a mapping of run keys to values, got {node!r}")
    items = node.items_ex(resolve=False) if isinstance(node, DictConfig) else node.items()
    return [(str(key), format_value(value, what, refusal)) for key, value in items]


def merge(*layers: Iterable[tuple[str, str]]) -> Pairs:
    """The layers' overrides in one list, a later layer's value of a key replacing an earlier one in its place."""
    return list(dict(itertools.chain(*layers)).items())


def arguments(overrides: Iterable[tuple[str, str]]) -> list[str]:
    """``key=value`` arguments of ``(key, value)`` overrides."""
    return [f"{key}={value}" for key, value in overrides]
