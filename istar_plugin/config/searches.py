"""Search files (``recipes/searches/*.yaml``, format in docs/searching.md): the run every trial makes (``fixed``),
the ``space`` sampled, seeds, budget, sampler, pruner, and the ``baseline`` compared with at ``final_seeds``.

>>> spec = parse({"fixed": {"recipe": "movie_snippets"}, "trials": 4,
...               "space": {"criterion.lam": {"low": 0.1, "high": 10, "log": True, "sign": "both"}}}, name="demo")
>>> spec.space[0].corners(), spec.trials, spec.seeds
([-10.0, -0.1, 0.1, 10.0], 4, (1,))
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..errors import ConfigError
from .composition import compose
from ..storage.reading import CONFIG_FILE_BYTES, read_text
from . import overrides
from .recipes import available, find_yaml, read_yaml

SEARCHES_SUBDIR = "searches"
RECORD = "search.yaml"
PROGRESS = "progress.log"
TRIALS, FINAL = "trials", "final"
TRIAL_EVALUATION = "data.eval_split=held_out"
SEED_STRIDE = 10 ** 6
VALUES, SCORES, FAILURE = "values", "scores", "failure"
FILE_KEYS = ("description", "base", "fixed", "space", "seeds", "trials", "sampler", "pruner", "baseline",
             "final_seeds", "storage")
SAMPLERS = ("tpe", "random", "qmc", "grid")
PRUNERS = ("median", "halving", "none")
SIGNS = ("positive", "negative", "both")
STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql", "journal")
DIMENSION_KEYS = ("low", "high", "log", "sign", "int", "choices")
MAX_TRIALS = 100_000


class SearchError(ConfigError):
    """A bad search file, space or search key; the message names the value and the choices."""


_fixed = functools.partial(overrides.from_mapping, refusal=SearchError)


@dataclass(frozen=True)
class Dimension:
    """One config key the search samples: a float or integer range, or a list of choices."""

    key: str
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    sign: str = "positive"
    integer: bool = False
    choices: tuple = ()

    def corners(self) -> list:
        """The extreme values a trial can give the key (every choice, for a list)."""
        if self.choices:
            return list(self.choices)
        low, high = (int(self.low), int(self.high)) if self.integer else (float(self.low), float(self.high))
        return {"positive": [low, high], "negative": [-high, -low], "both": [-high, -low, low, high]}[self.sign]

    def describe(self) -> str:
        """What the dimension spans, in words."""
        if self.choices:
            return f"one of {list(self.choices)}"
        span = f"{'integer ' if self.integer else ''}{self.low} to {self.high}"
        sign = {"positive": "", "negative": " in magnitude, negative", "both": " in magnitude"}[self.sign]
        return f"{span}{sign}{' on a log scale' if self.log else ''}{', either sign' if self.sign == 'both' else ''}"


@dataclass(frozen=True)
class SearchSpec:
    """A parsed search file; ``fixed`` and ``baseline`` are ``key=value`` overrides."""

    name: str
    fixed: tuple[str, ...]
    space: tuple[Dimension, ...]
    seeds: tuple[int, ...] = (1,)
    trials: int = 24
    sampler: str = "tpe"
    pruner: str = "median"
    baseline: tuple[str, ...] = ("criterion=cross_entropy",)
    final_seeds: tuple[int, ...] = ()
    storage: Optional[str] = None
    description: str = ""
    source: Optional[Path] = None

    def storage_url(self, search_dir: Path) -> str:
        """The study's database: ``storage``, else SQLite in the search directory (``study.db``)."""
        return self.storage or f"sqlite:///{Path(search_dir).resolve() / 'study.db'}"

    def as_dict(self) -> dict[str, Any]:
        """The search as ``search.yaml`` records it, readable by :func:`parse` again."""
        space = {d.key: ({"choices": list(d.choices)} if d.choices else
                         {"low": d.low, "high": d.high, "log": d.log, "sign": d.sign, "int": d.integer})
                 for d in self.space}
        return {"description": self.description, "fixed": dict(overrides.pairs(self.fixed)), "space": space,
                "seeds": list(self.seeds), "trials": self.trials, "sampler": self.sampler, "pruner": self.pruner,
                "baseline": dict(overrides.pairs(self.baseline)), "final_seeds": list(self.final_seeds),
                "storage": self.storage}

    def task(self) -> str:
        """The task every trial trains."""
        return compose([*self.fixed, f"seed={self.seeds[0]}"]).task

    def differences(self, other: "SearchSpec") -> list[str]:
        """The keys at which ``other`` is another search (``name`` when only that differs; ``trials`` may grow)."""
        mine = self.as_dict()
        changed = [key for key, value in other.as_dict().items() if key != "trials" and mine[key] != value]
        return changed or (["name"] if other.name != self.name else [])


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    seeds = value if isinstance(value, (list, tuple)) else [value]
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise SearchError(f"{where} must be a list of seeds (integers >= 0), got {value!r}")
    if len(set(seeds)) != len(seeds):
        raise SearchError(f"{where} names a seed twice: {list(seeds)}")
    return tuple(seeds)


def _dimension(key: str, spec: Any) -> Dimension:
    where = f"space.{key}"
    if not isinstance(spec, dict):
        raise SearchError(f"{where} must be a mapping ({{low, high[, log, sign, int]}} or {{choices: [...]}}), "
                          f"got {spec!r}")
    if unknown := sorted(set(spec) - set(DIMENSION_KEYS)):
        raise SearchError(f"{where}: unknown field {unknown[0]!r}; fields: {', '.join(DIMENSION_KEYS)}")
    if "choices" in spec:
        choices = spec["choices"]
        if set(spec) != {"choices"}:
            raise SearchError(f"{where}: choices take no other field, got {', '.join(sorted(spec))}")
        if not isinstance(choices, list) or not choices:
            raise SearchError(f"{where}.choices must be a non-empty list, got {choices!r}")
        if any(isinstance(v, (dict, list)) for v in choices) or len({repr(v) for v in choices}) != len(choices):
            raise SearchError(f"{where}.choices must be distinct scalars, got {choices!r}")
        return Dimension(key, choices=tuple(choices))
    if "low" not in spec or "high" not in spec:
        raise SearchError(f"{where} needs low and high (or choices)")
    for field in ("low", "high"):
        if isinstance(spec[field], bool) or not isinstance(spec[field], (int, float)):
            raise SearchError(f"{where}.{field} must be a number, got {spec[field]!r}")
    for field in ("log", "int"):
        if not isinstance(spec.get(field, False), bool):  # 'false', a string, is true to bool(): read by type
            raise SearchError(f"{where}.{field} must be true or false (unquoted), got {spec[field]!r}")
    low, high, log, integer = spec["low"], spec["high"], spec.get("log", False), spec.get("int", False)
    sign = spec.get("sign", "positive")
    if sign not in SIGNS:
        raise SearchError(f"{where}.sign {sign!r} unknown; choose one of: {', '.join(SIGNS)}")
    if not low < high:
        raise SearchError(f"{where}: low must be below high, got low={low}, high={high}")
    if integer and not (float(low).is_integer() and float(high).is_integer()):
        raise SearchError(f"{where}: an integer range needs whole low and high, got low={low}, high={high}")
    if log and low <= 0:
        raise SearchError(f"{where}: a log range needs 0 < low (a signed range: sign: both), got low={low}")
    if sign != "positive" and not log:
        raise SearchError(f"{where}.sign={sign} needs log: true (a linear range takes a negative low instead)")
    return Dimension(key, low, high, log, sign, integer)


def parse(content: Any, name: str, source: Optional[Path] = None, arguments: Sequence[str] = ()) -> SearchSpec:
    """A :class:`SearchSpec` from a search file's content and command-line ``key=value`` ``arguments``."""
    if not isinstance(content, (dict, DictConfig)):
        raise SearchError(f"search file {source or name} must be a mapping with keys {', '.join(FILE_KEYS)}")
    content = dict(OmegaConf.to_container(content) if isinstance(content, DictConfig) else content)
    if not content:
        raise SearchError(f"search file {source or name} is empty; keys: {', '.join(FILE_KEYS)}")
    if unknown := sorted(set(content) - set(FILE_KEYS)):
        raise SearchError(f"search file {source or name}: unknown key {unknown[0]!r}; keys: {', '.join(FILE_KEYS)}")
    content = with_base(content, name)
    command_line = []
    for key, value in overrides.pairs(arguments, "istar-tune", SearchError):
        if key in FILE_KEYS and key not in ("fixed", "space", "baseline", "description"):
            content[key] = yaml_value(value)
        else:
            command_line.append((key, value))
    fixed = overrides.arguments(overrides.merge(_fixed(content.get("fixed"), "fixed"), command_line))
    space = content.get("space")
    if not isinstance(space, dict) or not space:
        raise SearchError(f"search file {source or name}: space must map at least one run key to its range or choices")
    trials = content.get("trials", 24)
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= MAX_TRIALS:
        raise SearchError(f"trials must be an integer from 1 to {MAX_TRIALS}, got {trials!r}")
    for key, choices in (("sampler", SAMPLERS), ("pruner", PRUNERS)):
        if content.get(key, choices[0]) not in choices:
            raise SearchError(f"{key} {content[key]!r} unknown; choose one of: {', '.join(choices)}")
    storage = content.get("storage")
    if storage is not None and (not isinstance(storage, str) or storage.split(":")[0].split("+")[0]
                                not in STORAGE_SCHEMES):
        raise SearchError(f"storage {storage!r} is no database URL; schemes: {', '.join(STORAGE_SCHEMES)} "
                          "(sqlite:///PATH, postgresql://..., mysql://..., journal:PATH)")
    seeds = _seeds(content.get("seeds", [1]), "seeds")
    fixed_keys = {argument.partition("=")[0] for argument in fixed}
    clash = sorted(fixed_keys & set(space))
    if clash or "seed" in space or "seed" in fixed_keys:
        raise SearchError(f"{(clash or ['seed'])[0]} is both fixed and searched (seed: set seeds= instead); "
                          "keep it in one place")
    dimensions = tuple(_dimension(k, v) for k, v in space.items())
    if content.get("sampler") == "grid":
        trials = _grid_trials(dimensions, content.get("trials"))
    baseline = overrides.arguments(_fixed(content.get("baseline", {"criterion": "cross_entropy"}), "baseline"))
    return SearchSpec(name, tuple(fixed), dimensions, seeds, trials, content.get("sampler", "tpe"),
                      content.get("pruner", "median"), tuple(baseline),
                      _seeds(content.get("final_seeds", list(seeds)), "final_seeds"), storage,
                      str(content.get("description") or ""), source)


def grid_size(space: Sequence[Dimension]) -> tuple[int, str]:
    """How many settings a grid over ``space``'s choices holds, and its shape in words."""
    return math.prod(len(d.choices) for d in space), f"{' x '.join(str(len(d.choices)) for d in space)} choices"


def _grid_trials(space: Sequence[Dimension], trials: Optional[int]) -> int:
    for dimension in space:
        if not dimension.choices:
            raise SearchError(f"sampler=grid needs every dimension of the space to be a list of choices; "
                              f"space.{dimension.key} is a range ({dimension.describe()}): give it {{choices: [...]}}")
    size, shape = grid_size(space)
    if trials is None and size > MAX_TRIALS:
        raise SearchError(f"the grid's {size} settings ({shape}) exceed {MAX_TRIALS} trials; "
                          f"set trials={MAX_TRIALS} or fewer")
    if trials is not None and trials > size:
        raise SearchError(f"trials={trials} exceeds the grid's {size} settings ({shape}); set trials={size} or fewer")
    return size if trials is None else trials


def yaml_value(text: str) -> Any:
    """A command-line value read as YAML; text YAML cannot read stays text."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _read_file(name: str, where: str = "") -> tuple[Path, Any]:
    path = find_yaml(name, SEARCHES_SUBDIR)
    if path is None and name.endswith((".yaml", ".yml")) and Path(name).exists():
        path = Path(name)
    if path is None:
        known = ", ".join(available(SEARCHES_SUBDIR)) or "(none)"
        raise SearchError(f"{where}unknown search {name!r}; searches: {known}")
    try:
        return path, OmegaConf.to_container(read_yaml(path, "search file"))
    except (OmegaConfBaseException, yaml.YAMLError) as error:
        raise SearchError(f"search file {path} is not valid YAML: {' '.join(str(error).split())}") from None


def with_base(content: dict[str, Any], name: str, chain: Sequence[str] = ()) -> dict[str, Any]:
    """``content`` over the search its ``base`` names: ``fixed`` merged key by key, other keys replaced."""
    base = content.get("base")
    if base is None:
        return content
    if not isinstance(base, str):
        raise SearchError(f"search {name}: base must name a search file, got {base!r}")
    chain = [*chain, name]
    if Path(base).stem in chain:
        raise SearchError(f"search {name}: base {base!r} leads back to itself ({' -> '.join([*chain, base])})")
    _, parent = _read_file(base, where=f"search {name}: base: ")
    parent = with_base(dict(parent), Path(base).stem, chain)
    own = {key: value for key, value in content.items() if key != "base"}
    fixed = overrides.merge(_fixed(parent.get("fixed"), f"search {base}: fixed"), _fixed(own.get("fixed"), "fixed"))
    return {**parent, **own, "fixed": dict(fixed)}


def load(name: str, arguments: Sequence[str] = ()) -> SearchSpec:
    """The search ``name`` (a file in ``recipes/searches/`` or a path to a YAML file) with ``arguments`` applied."""
    path, content = _read_file(name)
    return parse(content, Path(name).stem, path, arguments)


def read_search(search_dir: Path) -> SearchSpec:
    """The search recorded in ``search_dir/search.yaml``."""
    path = Path(search_dir) / RECORD
    if not path.is_file():
        raise SearchError(f"{search_dir} is no search directory (no {RECORD}); istar-tune SEARCH starts one")
    try:
        content = yaml.safe_load(read_text(path, "search record", SearchError, CONFIG_FILE_BYTES))
    except yaml.YAMLError as error:
        raise SearchError(f"{path} is damaged (not YAML: {' '.join(str(error).split())})") from None
    if not isinstance(content, dict) or not isinstance(content.get("name"), str):
        raise SearchError(f"{path} is damaged (no mapping naming its search): start a new search_dir")
    return parse({k: v for k, v in content.items() if k != "name"}, content["name"], path)


def describe_values(values: dict[str, Any]) -> str:
    """A trial's config values in a line, floats to 4 significant digits."""
    return ", ".join(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
                     for key, value in values.items())


def trial_dir(search_dir: Path, number: int) -> Path:
    """``SEARCH_DIR/trials/NNNN``: trial ``number``'s folder, holding a run directory per seed."""
    return Path(search_dir) / TRIALS / f"{number:04d}"


def trial_arguments(spec: SearchSpec, values: dict[str, Any], seed: int) -> list[str]:
    """The ``istar-run`` arguments of a setting's run: the fixed overrides, the sampled ``values``, the seed."""
    return [*spec.fixed, *overrides.arguments(_fixed(values, "values")), f"seed={seed}"]


def baseline_arguments(spec: SearchSpec, seed: int) -> list[str]:
    """The baseline's arguments: the fixed ones (``criterion.*`` dropped for its own criterion), its own, the seed."""
    own_criterion = any(argument.startswith("criterion=") for argument in spec.baseline)
    fixed = [a for a in spec.fixed if not (own_criterion and a.startswith("criterion."))]
    return [*fixed, *spec.baseline, f"seed={seed}"]


def check(spec: SearchSpec) -> None:
    """Compose a trial's run at each corner of the space and the baseline's run; a refusal is one line."""
    if not any(argument.startswith("data.validation_split=") for argument in spec.fixed):
        raise SearchError("a search chooses on data held out of the training set: set data.validation_split "
                          "(e.g. data.validation_split=0.1) in fixed or on the command line")
    runs = []
    for index in range(max(len(d.corners()) for d in spec.space)):
        values = {d.key: d.corners()[min(index, len(d.corners()) - 1)] for d in spec.space}
        shown = ", ".join(overrides.arguments(values.items()))
        runs.append(([*trial_arguments(spec, values, spec.seeds[0]), TRIAL_EVALUATION], f"a trial ({shown})"))
    for arguments, what in [*runs, (baseline_arguments(spec, spec.final_seeds[0]), "the baseline")]:
        try:
            cfg = compose(arguments)
        except ConfigError as error:
            raise SearchError(f"{what} is refused: {error.args[0] if error.args else error}") from None
        if not cfg.data.validation_split:
            raise SearchError(f"{what} holds nothing out (data.validation_split=0): a search chooses on held-out data")
