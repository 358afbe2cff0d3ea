"""Paths a user gives (config keys, command-line arguments): ``~`` and ``~user`` expanded as a shell does, and checked
against this system's ``NAME_MAX`` and ``PATH_MAX``; either refused in one line."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import ConfigError
from ..settings import shortened


def expand_home(path: str | os.PathLike, what: str = "") -> str:
    """``path`` with a leading ``~`` or ``~user`` expanded; ``what`` (``KEY=`` or ``--out``) names it in a refusal."""
    text = os.fspath(path)
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        prefix = expanded.split("/", 1)[0]
        named = f"{what}{text}" if what.endswith("=") or not what else f"{what} {text}"
        raise ConfigError(f"{named}: there is no user {prefix[1:]!r} on this machine to expand {prefix}; "
                          f"write ./{text} for a folder of that name")
    return expanded


def path_argument(text: str) -> Path:
    """An argparse ``type=`` for a path argument: :func:`expand_home` as a :class:`~pathlib.Path`."""
    return Path(text_argument(text))


def text_argument(text: str) -> str:
    """An argparse ``type=`` for an argument that may be a path (or a name, left as it is): :func:`expand_home`."""
    try:
        return expand_home(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def check_path_length(path: str, what: str) -> None:
    """Raise :class:`ConfigError` naming ``what`` (``output_dir=``) when ``path`` or a component is too long here."""
    absolute = os.path.abspath(path)
    anchor = next((folder for folder in (Path(absolute), *Path(absolute).parents) if os.path.isdir(folder)), Path("/"))
    named = f"{what}{shortened(path)}"
    name_max, path_max = _limit(anchor, "PC_NAME_MAX", 255), _limit(anchor, "PC_PATH_MAX", 4096)
    for part in Path(path).parts:
        if len(os.fsencode(part)) > name_max:
            raise ConfigError(f"{named}: its component {shortened(part)} is longer than the {name_max} bytes a file "
                              f"name may have on {anchor} (NAME_MAX); choose a shorter name")
    if len(os.fsencode(absolute)) >= path_max:
        raise ConfigError(f"{named}: the path is longer than the {path_max - 1} bytes this system allows for a path "
                          "(PATH_MAX); choose a shorter one")


def _limit(folder: Path, name: str, fallback: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError):
        return fallback
