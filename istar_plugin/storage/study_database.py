"""The database of an Optuna study (SQLite, any SQLAlchemy URL, or ``journal:PATH``), opened with connect and
statement timeouts and a watchdog for a hung PostgreSQL server; a fault becomes one :class:`StudyDatabaseError` line."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import optuna
import sqlalchemy.exc
from optuna.storages.journal import JournalFileBackend
import sqlalchemy.event
import sqlalchemy.pool
from sqlalchemy.engine import make_url

from ..errors import ConfigError, RunDirError, RunError, one_line

CONNECT_TIMEOUT_S = 10
STATEMENT_TIMEOUT_S = 120  # for the server, the TCP connection (tcp_user_timeout) and the watchdog alike
SQLITE_BUSY_TIMEOUT_S = 60  # workers sharing one SQLite file wait this long for each other's writes
PACKAGES = {"psycopg": "'psycopg[binary]'", "psycopg2": "psycopg2-binary", "pg8000": "pg8000", "asyncpg": "asyncpg",
            "pymysql": "PyMySQL", "MySQLdb": "mysqlclient", "mysql": "mysql-connector-python"}
ADVICE = (  # (words in the database's own message, what to do), first match wins
    (("disk is full", "no space left", "disk full"), "free space on its disk, then start the search again (its "
                                                     "trials are kept)"),
    (("readonly", "read-only", "permission denied", "access denied"), "make it writable by this user, or set storage= "
                                                                       "to a database this user can write"),
    (("malformed", "not a database", "corrupt", "damaged"), "it is damaged: restore it from a copy, or start a new "
                                                            "search_dir"),
    (("unable to open database file", "no such file or directory"), "create its folder, or set storage= to a "
                                                                    "database that exists"),
)
STALLED = "the server stopped answering (a statement had no reply within {:g} s)"
REACH = ("check that the database server runs and is reachable from this machine, then start the search again "
         "(finished trials are kept, a stopped trial resumes)")


class StudyDatabaseError(RunDirError):
    """A study's database cannot be opened, read or written: unreachable, full, damaged, read-only or timed out."""


def shown(url: str) -> str:
    """``url`` with its password masked."""
    with contextlib.suppress(Exception):
        parsed = make_url(url)
        if parsed.password is not None:
            return parsed.render_as_string(hide_password=True)
    return url


def _engine_options(url: str) -> dict[str, Any]:
    """SQLAlchemy engine options: the driver's timeouts the URL does not set itself, a pre-ping but for psycopg."""
    parsed = make_url(url)
    backend, driver, given = parsed.get_backend_name(), parsed.get_dialect().driver, set(parsed.query)
    if backend == "sqlite":
        if (parsed.database in (None, "", ":memory:") or str(parsed.database).startswith("file::memory:")
                or parsed.query.get("mode") == "memory"):
            raise ConfigError(f"storage {url!r} is an in-memory database, which ends with its process: a study must "
                              "outlive it; give a file (sqlite:///PATH) or a server's URL")
        if Path(str(parsed.database)).expanduser().is_file() and Path(str(parsed.database)).stat().st_size == 0:
            raise ValueError("it is an empty file, not a database")  # a study's file holds its tables from creation
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    arguments: dict[str, Any] = {}
    if driver in ("psycopg", "psycopg2"):
        arguments = {"connect_timeout": CONNECT_TIMEOUT_S, "options": f"-c statement_timeout={STATEMENT_TIMEOUT_S}s",
                     "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
                     "tcp_user_timeout": STATEMENT_TIMEOUT_S * 1000}
    elif driver in ("pymysql", "mysqldb"):
        arguments = {"connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": STATEMENT_TIMEOUT_S,
                     "write_timeout": STATEMENT_TIMEOUT_S}
    return {"pool_pre_ping": driver not in ("psycopg", "psycopg2"),
            "connect_args": {k: v for k, v in arguments.items() if k not in given}}


class Watchdog:
    """Shuts down the socket of a checked-out psycopg connection with no reply in ``STATEMENT_TIMEOUT_S``."""

    lock = threading.Lock()
    armed: dict[int, tuple[float, Any, int]] = {}  # id(DBAPI connection): (deadline, connection, thread using it)
    stalled: dict[int, float] = {}  # thread whose connection was shut down: the seconds it waited
    running = False  # its thread started (a forked child starts its own, and forgets its parent's connections)

    @classmethod
    def arm(cls, connection: Any) -> bool:
        """Watch ``connection`` from now on, if it is psycopg's; whether it is."""
        if type(connection).__module__.split(".")[0] not in ("psycopg", "psycopg2"):
            return False
        with cls.lock:
            if not cls.running:
                cls.running = True
                threading.Thread(target=cls.run, name="study-database-watchdog", daemon=True).start()
            cls.armed[id(connection)] = (time.monotonic() + STATEMENT_TIMEOUT_S, connection, threading.get_ident())
        return True

    @classmethod
    def forget(cls) -> None:
        """In a forked child: no thread, no connection of the parent's (its sockets are shared with the parent)."""
        cls.lock, cls.armed, cls.stalled, cls.running = threading.Lock(), {}, {}, False

    @classmethod
    def checkout(cls, connection: Any, record: Any, proxy: Any) -> None:
        """Arm, then ping the connection (its server may have restarted or hung since it was pooled)."""
        if not cls.arm(connection):
            return
        cls.stalled.pop(threading.get_ident(), None)
        try:
            with contextlib.closing(connection.cursor()) as cursor:
                cursor.execute("SELECT 1")
            connection.rollback()
        except Exception as error:  # noqa: BLE001 - any failed ping: SQLAlchemy drops it and connects anew
            raise sqlalchemy.exc.DisconnectionError(one_line(error)) from error

    @classmethod
    def statement(cls, connection: Any, *_: Any) -> None:
        cls.arm(connection.connection.dbapi_connection)

    @classmethod
    def release(cls, connection: Any, record: Any) -> None:
        with cls.lock:
            cls.armed.pop(id(connection), None)

    @classmethod
    def run(cls) -> None:
        while True:
            time.sleep(1)
            with cls.lock:  # held while shutting down: the pool cannot close (and the OS reuse) the socket meanwhile
                for key, (deadline, connection, thread) in list(cls.armed.items()):
                    if time.monotonic() > deadline:
                        del cls.armed[key]
                        cls.stalled[thread] = STATEMENT_TIMEOUT_S
                        with contextlib.suppress(Exception):  # closed meanwhile: nothing waits on it
                            sock = socket.socket(fileno=connection.fileno())
                            try:
                                sock.shutdown(socket.SHUT_RDWR)
                            finally:
                                sock.detach()  # the descriptor stays the driver's, which closes it


for _target, _event, _listener in ((sqlalchemy.pool.Pool, "checkout", Watchdog.checkout),
                                   (sqlalchemy.engine.Engine, "before_cursor_execute", Watchdog.statement),
                                   (sqlalchemy.pool.Pool, "checkin", Watchdog.release),
                                   (sqlalchemy.pool.Pool, "close", Watchdog.release)):
    sqlalchemy.event.listen(_target, _event, _listener)  # on the classes: an engine Optuna re-creates is watched too
os.register_at_fork(after_in_child=Watchdog.forget)


def check_journal(path: Path) -> None:
    """Refuse (ValueError) a journal with a complete line that is no JSON (an unterminated last line may be a write)."""
    if not path.is_file():
        return
    with path.open("rb") as journal:
        for number, line in enumerate(journal, start=1):
            if line.endswith(b"\n"):
                try:
                    json.loads(line.rstrip(b"\r\n"))
                except ValueError as error:  # a JSONDecodeError, or bytes that are no text
                    decoding = isinstance(error, json.JSONDecodeError)
                    where = f"{error.msg.removesuffix(' at')} at column {error.colno}" if decoding else one_line(error)
                    raise ValueError(f"its line {number} is damaged ({where})") from None


def missing_driver(url: str) -> str:
    """The pip package of the database module SQLAlchemy needs for ``url`` as written (its dialect's default)."""
    try:
        make_url(url).get_dialect().import_dbapi()
    except ImportError as error:
        name = (getattr(error, "name", None) or "").split(".")[0]
        return PACKAGES.get(name, name or "the driver its URL names")
    except Exception:  # noqa: BLE001 - an unreadable URL: SQLAlchemy's own error says so when it is opened
        pass
    return "the driver its URL names"


def _refusal(url: str, doing: str, reason: str) -> StudyDatabaseError:
    lowered = reason.lower()
    local = url.startswith(("sqlite", "journal:"))
    what = next((what for words, what in ADVICE if any(word in lowered for word in words)),
                "check the database file and its folder, then start the search again" if local else REACH)
    return StudyDatabaseError(f"cannot {doing} the study's database {shown(url)!r}: {reason}; {what}")


@contextlib.contextmanager
def database_errors(url: str, doing: str = "use") -> Iterator[None]:
    """Turn a storage fault raised inside into one :class:`StudyDatabaseError` line naming ``url`` and what to do."""
    try:
        yield
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError) as error:
        waited = Watchdog.stalled.pop(threading.get_ident(), None)
        cause = error  # the database's own message behind Optuna's and SQLAlchemy's wrappers
        while isinstance(cause, optuna.exceptions.StorageInternalError) and cause.__cause__ is not None:
            cause = cause.__cause__
        reason = one_line(getattr(cause, "orig", None) or cause)[:300] if waited is None else STALLED.format(waited)
        raise _refusal(url, doing, reason) from None


def connect(url: str, create: bool = True) -> optuna.storages.BaseStorage:
    """The study's storage at ``url`` (``create=False``: creating no table); any fault opening it is one line."""
    optuna.logging.set_verbosity(logging.WARNING)  # a trial's progress is the run's own; Optuna's INFO repeats it
    try:
        with database_errors(url, "open"):
            if url.startswith("journal:"):
                path = Path(url[len("journal:"):]).expanduser()
                check_journal(path)
                return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
            try:
                options = _engine_options(url)
            except sqlalchemy.exc.ArgumentError as error:
                raise ConfigError(f"storage {url!r} is no database URL SQLAlchemy reads: {one_line(error)}") from None
            except ImportError:  # the dialect itself (e.g. a third-party one) is not installed
                options = {}
            return optuna.storages.RDBStorage(url, engine_kwargs=options, skip_table_creation=not create)
    except RunError:
        raise
    except ImportError:  # Optuna's "Failed to import DB access module": the URL's driver is not installed
        raise ConfigError(f"storage {shown(url)!r} needs a database driver this Python lacks: pip install "
                          f"{missing_driver(url)}") from None
    except (OSError, ValueError, RuntimeError) as error:  # a journal file's folder, a URL the driver refuses
        raise _refusal(url, "open", one_line(error)[:300]) from None
