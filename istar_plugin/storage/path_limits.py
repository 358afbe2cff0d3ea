"""A path a user gives, checked against this system's ``NAME_MAX`` and ``PATH_MAX`` when the config is composed."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError
from ..settings import shortened

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
