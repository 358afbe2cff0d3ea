"""Grids of runs: grid files (``recipes/grids/*.yaml``, docs/grids.md) and command-line sweeps, expanded into cells
named by the values they sweep.

>>> grid = sweep(["recipe=sst2", "criterion=istar", "criterion.lam=-5,-1", "seed=1,2"])
>>> [cell.name for cell in grid.cells]
['lam=-5,seed=1', 'lam=-5,seed=2', 'lam=-1,seed=1', 'lam=-1,seed=2']
>>> grid.cells[0].arguments
('recipe=sst2', 'criterion=istar', 'criterion.lam=-5', 'seed=1')
"""
from __future__ import annotations

import fnmatch
import functools
import hashlib
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from ..config import available, compose, find_yaml, overrides
from ..config.recipes import read_yaml
from ..errors import ConfigError

GRIDS_SUBDIR = "grids"
FILE_KEYS = ("description", "fixed", "sweep", "variants")
MAX_NAME_LENGTH = 150
UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


class GridError(ConfigError):
    """A bad grid file or sweep; the message names the value and the choices."""


@dataclass(frozen=True)
class Cell:
    """One run of a grid: ``name`` (its directory), ``arguments`` for ``compose`` and its ``swept`` values."""

    name: str
    arguments: tuple[str, ...]
    swept: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Grid:
    """Named cells from a grid file (``source`` is its path) or a command-line sweep (``source`` None)."""

    name: str
    cells: tuple[Cell, ...]
    source: Optional[Path] = None

    def default_dir(self) -> Path:
        """``runs/grids/NAME`` for a grid file, ``runs/multirun/FIXED-ARGUMENTS`` for a command-line sweep."""
        return Path("runs", "grids" if self.source else "multirun", self.name)

    def select(self, patterns: Sequence[str]) -> "Grid":
        """Only the cells whose name matches one of the shell-style ``patterns``; an unmatched pattern is an error."""
        for pattern in patterns:
            if not any(fnmatch.fnmatchcase(cell.name, pattern) for cell in self.cells):
                names = ", ".join(cell.name for cell in self.cells[:5])
                more = f", ... ({len(self.cells)} in all)" if len(self.cells) > 5 else ""
                raise GridError(f"no cell of grid {self.name!r} matches {pattern!r}; cells: {names}{more}")
        chosen = tuple(c for c in self.cells if any(fnmatch.fnmatchcase(c.name, p) for p in patterns))
        return Grid(self.name, chosen, self.source)


def run_arguments(cell: Cell, grid_dir: Path) -> list[str]:
    """``cell``'s ``compose`` arguments with its run directory in ``grid_dir`` (quoted for YAML)."""
    return [*cell.arguments, "output_dir='" + str(Path(grid_dir) / cell.name).replace("'", "''") + "'"]


def composed(arguments: list[str]) -> DictConfig | str:
    """``compose(arguments)``, or its refusal's message."""
    try:
        return compose(arguments)
    except ConfigError as error:
        return str(error)


def check_values(grid: Grid, grid_dir: Path) -> None:
    """Compose, as :func:`~.submit.plan` does, the first cell and then each cell that sweeps a value no cell before
    it did, so that a bad value is refused in one line before planning; composing every cell is planning's job."""
    seen: set[tuple[str, str]] = set()
    for cell in grid.cells:
        if seen and set(cell.swept) <= seen:
            continue
        seen.update(cell.swept)
        if isinstance(refusal := composed(run_arguments(cell, grid_dir)), str):
            raise GridError(f"cell {cell.name}: {refusal}")


def split_values(text: str, key: str) -> list[str]:
    """Split ``key``'s value at commas outside brackets and quotes: ``"1,[2,3]"`` -> ``["1", "[2,3]"]``."""
    parts, depth, quote, current = [], 0, "", ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    parts.append(current)
    if any(not part for part in parts):
        raise GridError(f"argument {key + '=' + text!r} gives {key} an empty value; expected {key}=VALUE or "
                        f"{key}=A,B,... with no value empty (null for no value)")
    return parts


def _labels(keys: Sequence[str]) -> dict[str, str]:
    """Each key's label in names: its last dotted part, or the whole key when that part is ambiguous."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return {key: short if last.count(short) == 1 else key for key, short in zip(keys, last)}


def _name(pairs: Sequence[tuple[str, str]], labels: dict[str, str]) -> str:
    name = ",".join(f"{labels[key]}={UNSAFE.sub('_', value)}" for key, value in pairs) or "default"
    if len(name) > MAX_NAME_LENGTH:
        name = f"{name[: MAX_NAME_LENGTH - 11]}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"
    return name


def _build(name: str, fixed: list[tuple[str, str]], blocks: list[tuple[list, list]], keys: list[str],
           source: Optional[Path] = None) -> Grid:
    """Cells of every (block, its own fixed overrides) pair's product, named by their swept ``keys`` in that order."""
    labels = _labels(keys)
    cells: dict[str, Cell] = {}
    runs: dict[tuple, Cell] = {}  # by the swept values as the config reads them
    for block, own_fixed in blocks:
        block_keys = [key for key, _ in block]
        for values in itertools.product(*(values for _, values in block)):
            swept = sorted(zip(block_keys, values), key=lambda pair: keys.index(pair[0]))
            cell = Cell(_name(swept, labels), tuple(overrides.arguments(overrides.merge(fixed, own_fixed, swept))),
                        tuple(swept))
            run = tuple((key, _read(value)) for key, value in swept)
            if (other := cells.get(cell.name) or runs.get(run)) is not None:
                clash = (f"share the name {cell.name!r}" if other.name == cell.name else
                         "are the same run (their values are equal as the config reads them)")
                raise GridError(f"two cells of grid {name!r} {clash}: {list(other.swept)} and {swept}")
            cells[cell.name] = runs[run] = cell
    return Grid(name, tuple(cells.values()), source)


def _split_arguments(arguments: Sequence[str], swept_keys: Sequence[str] = ()) -> tuple[dict, list, list]:
    """(values kept of each of ``swept_keys``, new axes ``key=a,b``, fixed ``key=a``) of command-line ``arguments``;
    a key given twice takes its last value, as in a run's command line."""
    keep: dict[str, list[str]] = {}
    axes, fixed = [], []
    for key, value in overrides.merge(overrides.pairs(arguments, refusal=GridError)):
        values = split_values(value, key)
        if key in swept_keys:
            keep[key] = values
        elif len(values) > 1:
            axes.append((key, values))
        else:
            fixed.append((key, value))
    return keep, axes, fixed


def sweep(arguments: Sequence[str]) -> Grid:
    """A command-line sweep: ``key=a,b,c`` sweeps a key, ``key=a`` fixes it (named after its fixed arguments)."""
    _, axes, fixed = _split_arguments(arguments)
    keys = list(dict.fromkeys(key for key, _ in axes))
    return _build(_name(fixed, _labels([k for k, _ in fixed])), fixed, [(axes, [])], keys)


def _axes(node: Any, where: str) -> list[tuple[str, list[str]]]:
    if not isinstance(node, DictConfig):
        raise GridError(f"{where} must be a mapping of key: value or [values], got {node!r}")
    axes = []
    for key, value in node.items_ex(resolve=False):
        values = list(value) if isinstance(value, ListConfig) else [value]
        if not values:
            raise GridError(f"{where}: {key!r} has an empty list of values")
        axes.append((str(key), [overrides.format_value(v, "a swept value", GridError) for v in values]))
    return axes


def load(name: str, arguments: Sequence[str] = ()) -> Grid:
    """A grid file's cells; a swept key in ``arguments`` keeps the cells with its values, any other overrides them."""
    path = find_yaml(name, GRIDS_SUBDIR)
    if path is None:
        raise GridError(f"unknown grid {name!r}; available: {', '.join(available(GRIDS_SUBDIR)) or '(none)'}")
    try:
        spec = read_yaml(path, "grid file", GridError)
    except (OSError, yaml.YAMLError) as error:
        raise GridError(f"grid file {path} cannot be read as YAML: {' '.join(str(error).split())}") from None
    if not isinstance(spec, DictConfig):
        raise GridError(f"grid file {path} must be a mapping with keys {', '.join(FILE_KEYS)}")
    if unknown := sorted(set(spec.keys()) - set(FILE_KEYS)):
        raise GridError(f"grid file {path}: unknown key(s) {', '.join(map(str, unknown))}; "
                        f"allowed: {', '.join(FILE_KEYS)}")
    fixed = _fixed(spec.get("fixed") or OmegaConf.create({}), f"{path}: fixed")
    base = _axes(spec.get("sweep") or OmegaConf.create({}), f"{path}: sweep")
    own_fixed, blocks = [], []
    for i, variant in enumerate(spec.get("variants") or [OmegaConf.create({})]):
        axes = variant
        if isinstance(variant, DictConfig):
            axes = OmegaConf.create({key: value for key, value in variant.items_ex(resolve=False) if key != "fixed"})
            variant = variant.get("fixed") or OmegaConf.create({})
        own_fixed.append(_fixed(variant, f"{path}: variants[{i}].fixed"))
        blocks.append(base + _axes(axes, f"{path}: variants[{i}]"))
    swept_keys = list(dict.fromkeys(key for block in blocks for key, _ in block))

    keep, extra_axes, cli_fixed = _split_arguments(arguments, swept_keys)
    fixed = overrides.merge(fixed, cli_fixed)
    kept = [(_restrict(block, keep) + extra_axes, own) for block, own in zip(blocks, own_fixed)
            if set(keep) <= {key for key, _ in block}]
    kept = [(block, own) for block, own in kept if all(values for _, values in block)]
    if not kept:
        wanted = " and ".join(f"{key} in {values}" for key, values in keep.items())
        raise GridError(f"grid {path.stem!r} has no cell with {wanted}")
    return _build(path.stem, fixed, kept, swept_keys + [key for key, _ in extra_axes], path)


def _fixed(node: Any, where: str) -> list[tuple[str, str]]:
    if not isinstance(node, DictConfig):
        raise GridError(f"{where} must be a mapping of key: value, got {node!r}")
    return overrides.from_mapping(node, where, GridError, "a swept value")


@functools.cache  # a grid reads each of its few values for each of its many cells
def _read(value: str) -> Any:
    """``value`` as the config reads it (:func:`~..config.overrides.read_value`), comparable and hashable: numbers
    equal as numbers (``-5`` and ``-5.0``), true and false unequal to 1 and 0."""
    return _comparable(overrides.read_value(value))


def _comparable(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, list):
        return ("list", *map(_comparable, value))
    if isinstance(value, dict):
        return ("dict", *sorted((str(key), _comparable(item)) for key, item in value.items()))
    return value


def _same(a: str, b: str) -> bool:
    """Equal as the config reads them: as numbers when both are numbers (``-5`` and ``-5.0``), ``True`` and ``true``."""
    return _read(a) == _read(b)


def _restrict(block: list[tuple[str, list[str]]], keep: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    return [(key, [v for v in values if any(_same(v, k) for k in keep[key])] if key in keep else values)
            for key, values in block]
