"""The database of an Optuna study: SQLite, any SQLAlchemy URL, or Optuna's journal file (``journal:PATH``)."""
from __future__ import annotations

import logging
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend

from ..errors import ConfigError


def storage(url: str, create: bool = True) -> optuna.storages.BaseStorage:
    """Optuna's storage at ``url``, its errors as Optuna raises them; ``create=False`` creates no table."""
    if url.startswith("journal:"):
        return optuna.storages.JournalStorage(JournalFileBackend(str(Path(url[len("journal:"):]).expanduser())))
    return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True} if "sqlite" not in url else {},
                                      skip_table_creation=not create)


def connect(url: str) -> optuna.storages.BaseStorage:
    """The study's storage at ``url``; an unreachable database or a missing driver is one ConfigError line."""
    optuna.logging.set_verbosity(logging.WARNING)  # a trial's progress is the run's own; Optuna's INFO repeats it
    try:
        return storage(url)
    except ImportError:  # Optuna's "Failed to import DB access module": the URL's driver is not installed
        drivers = {"postgresql": "psycopg2-binary", "mysql": "PyMySQL (with mysql+pymysql://)"}
        driver = drivers.get(url.split(":")[0].split("+")[0], "the driver its URL names")
        raise ConfigError(f"storage {url!r} needs a database driver this Python lacks: pip install {driver}") from None
    except Exception as error:  # SQLAlchemy's many errors: unreachable host, refused login, bad URL
        reason = " ".join(str(getattr(error, "orig", None) or error).split())[:300]
        raise ConfigError(f"cannot open the study's database {url!r}: {reason}") from None
