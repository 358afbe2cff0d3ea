"""Paths a user gives (config keys, command-line arguments) with ``~`` and ``~user`` expanded, as a shell does; a
``~user`` naming no user of this machine is refused in one line."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import ConfigError

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
