"""Where a record was made, stamped into every ``results.json`` under :data:`PROVENANCE`: the host, the CPU and its
bf16 features, torch, and the code's git commit (``+modified`` when tracked files differ)."""
from __future__ import annotations

import functools
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any, Optional

from .. import __version__

PROVENANCE = "provenance"

CPU_FLAGS = ("avx512_bf16", "amx_tile", "amx_bf16")
"""The CPU features recorded: with them torch computes bf16 natively, and AMX kernels round differently."""

PACKAGE = Path(__file__).resolve().parents[1]


def machine() -> dict[str, Any]:
    """This process's host name, CPU model and flags, torch version, istar_plugin version and code commit."""
    import torch

    try:
        cpu, flags = cpu_of(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
    except OSError:  # not Linux
        cpu, flags = platform.processor() or None, None
    return {"host": socket.gethostname(), "cpu": cpu, "cpu_flags": flags, "torch": torch.__version__,
            "istar_plugin": __version__, "commit": code_commit()}


def cpu_of(cpuinfo: str) -> tuple[Optional[str], Optional[list[str]]]:
    """The CPU model and which of :data:`CPU_FLAGS` it has, from the text of ``/proc/cpuinfo``."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags")
    return fields.get("model name") or None, None if flags is None else [f for f in CPU_FLAGS if f in flags.split()]


@functools.lru_cache(maxsize=1)
def code_commit(package: Path = PACKAGE) -> Optional[str]:
    """The commit of the git checkout holding ``package`` (``+modified`` when a tracked file differs); else None."""
    def git(*arguments: str) -> str:
        return subprocess.run(["git", "--no-optional-locks", "-C", str(package.parent), *arguments], check=True,
                              capture_output=True, text=True, timeout=30).stdout.strip()
    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != package.parent:
            return None  # e.g. site-packages inside some other repository
        modified = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "HEAD") + ("+modified" if modified else "")
    except (OSError, subprocess.SubprocessError):
        return None
