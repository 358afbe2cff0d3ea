"""Commands run as an ordinary user: as root, as uid 65534 (``nobody``) through ``setpriv`` (or ``runuser``); not as
root, as the user this is. Where uid 65534 may not search a folder on the way to the interpreter or the checkout (a
Python under root's 0700 home, as pyenv installs it; a clone under a 0700 ``mktemp -d`` folder, as CI makes one), the
command runs in a private mount namespace in which each such folder is overlaid, unchanged but searchable; nothing on
disk changes. scripts/error_sweep.py and tests/test_permissions.py run their commands as that user so.

>>> command = overlaid_command(["id", "-u"], [Path("/root")], Path("/w/.overlays"))
>>> command[:4], command[-3:]
(['unshare', '--mount', '--propagation', 'private'], ['sh', 'id', '-u'])
>>> print(command[6].replace(" && ", "\\n"))
mkdir -p /w/.overlays
mount -t tmpfs -o mode=0755 tmpfs /w/.overlays
mkdir -m 0755 /w/.overlays/upper0 /w/.overlays/work0
mount -t overlay overlay -o lowerdir=/root,upperdir=/w/.overlays/upper0,workdir=/w/.overlays/work0 /root
exec "$@"
"""
from __future__ import annotations

import os
import shlex
import shutil
import stat
import sys
from pathlib import Path
from typing import Callable, Iterable

UID = 65534  # nobody: the user the commands run as, under root


class Unavailable(Exception):
    """Root cannot run a command as uid 65534 here: neither setpriv nor runuser, or no unshare for an overlay."""


def unsearchable_folders(paths: Iterable[Path]) -> list[Path]:
    """The existing folders, outermost first, that others may not search on the way to ``paths`` (a folder among
    ``paths`` counts too).

    >>> unsearchable_folders([Path("/")])
    []
    """
    found = {folder for path in paths for folder in (path, *path.parents)
             if folder.is_dir() and not folder.stat().st_mode & stat.S_IXOTH}
    return sorted(found, key=lambda folder: len(folder.parts))


def overlaid_command(command: list[str], overlaid: list[Path], layers: Path) -> list[str]:
    """``command`` run in a private mount namespace in which each of ``overlaid`` is an overlay of itself whose top
    (a tmpfs mounted on ``layers``, a folder root may make) is searchable by all."""
    mounts = [f"mkdir -p {shlex.quote(str(layers))}", f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(layers))}"]
    for number, folder in enumerate(overlaid):
        upper, scratch = layers / f"upper{number}", layers / f"work{number}"
        options = f"lowerdir={folder},upperdir={upper},workdir={scratch}"
        mounts += [f"mkdir -m 0755 {shlex.quote(str(upper))} {shlex.quote(str(scratch))}",
                   f"mount -t overlay overlay -o {shlex.quote(options)} {shlex.quote(str(folder))}"]
    script = " && ".join(mounts) + ' && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command]


def command_wrapper(python: str, *checkouts: Path) -> Callable[[list[str], Path], list[str]]:
    """``wrap(command, layers)``: ``command`` (which runs ``python`` on ``checkouts``) as the ordinary user runs it,
    overlaid (see :func:`overlaid_command`) where uid 65534 may not search the way to ``python``, this process's
    prefixes or ``checkouts``. Raises :class:`Unavailable` when root has no way to run it so."""
    if os.geteuid() != 0:
        return lambda command, layers: list(command)
    setpriv, runuser = shutil.which("setpriv"), shutil.which("runuser")
    if setpriv:
        drop = [setpriv, f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
    elif runuser:
        drop = [runuser, "-u", "nobody", "--"]
    else:
        raise Unavailable("running as root without setpriv or runuser: cannot run a command as an unprivileged user")
    needed = [Path(os.path.realpath(python)), Path(sys.base_prefix), Path(sys.prefix), *checkouts]
    overlaid = unsearchable_folders(needed)
    if overlaid and not shutil.which("unshare"):
        raise Unavailable(f"uid {UID} cannot search {overlaid[0]} and unshare is missing to overlay it")
    if not overlaid:
        return lambda command, layers: [*drop, *command]
    return lambda command, layers: overlaid_command([*drop, *command], overlaid, layers)
