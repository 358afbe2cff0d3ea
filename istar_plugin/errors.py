"""What can go wrong in a run that is not a bug: one :class:`RunError` class per kind, each with its own exit code;
the command-line tools print its message as one line. Anything else is a bug and shows its traceback.

>>> exit_code(KeyError("a bug")), exit_code(KeyboardInterrupt())
(1, 130)
>>> [(cls.__name__, cls.exit_code) for cls in RunError.__subclasses__() if cls is not Stopped]
... # doctest: +NORMALIZE_WHITESPACE
[('ConfigError', 2), ('DataError', 3), ('RunDirError', 4), ('CheckpointError', 5), ('DivergedError', 6),
 ('ModelError', 7)]
"""
from __future__ import annotations

import os
import sys
import traceback
import warnings
from typing import Callable

TRACEBACK_ENV = "ISTAR_TRACEBACK"


class RunError(Exception):
    """An expected failure; its message names the value or file and what to do about it."""

    exit_code = 1


class ConfigError(RunError, ValueError):
    """A bad recipe, group option, key or value; the message names it and the allowed choices."""

    exit_code = 2


class DataError(RunError, ValueError):
    """Data are missing or malformed; the message names the file and line (or the hub split and row)."""

    exit_code = 3


class RunDirError(RunError):
    """A run directory or output folder cannot be used: held by or holding another run, foreign files, not writable."""

    exit_code = 4


class CheckpointError(RunError):
    """No intact checkpoint to resume from although the run directory has some."""

    exit_code = 5


class DivergedError(RunError):
    """The loss or the gradient norm became NaN or infinite; the message names the first such step."""

    exit_code = 6


class ModelError(RunError):
    """The model cannot be found, loaded, or placed on the requested device."""

    exit_code = 7


class Stopped(RunError):
    """A signal stopped the run at a step's end, after saving a checkpoint; the exit status is 128 + its number."""

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.exit_code = 128 + signal_number


def exit_code(error: BaseException) -> int:
    """The process exit status for ``error``: its class's code, 130 for Ctrl-C, 1 for anything else (a bug)."""
    if isinstance(error, RunError):
        return error.exit_code
    return 130 if isinstance(error, KeyboardInterrupt) else 1


def one_line(error: BaseException) -> str:
    """The error's message with its whitespace (newlines included) collapsed."""
    return " ".join(str(error).split()) or type(error).__name__


def run_command(prog: str, command: Callable[[], int], show_traceback: bool = False) -> int:
    """Run a command-line tool's body: an expected failure prints ``PROG: error: MESSAGE`` (its traceback only
    when wanted) and returns its exit code; warnings print as ``PROG: warning: MESSAGE``; bugs propagate."""
    formatting = warnings.formatwarning
    warnings.formatwarning = lambda message, *args, **kwargs: f"{prog}: warning: {one_line(message)}\n"
    try:
        return command()
    except RunError as error:
        if show_traceback or os.environ.get(TRACEBACK_ENV, "0") not in ("", "0"):
            traceback.print_exc()
        print(f"{prog}: error: {one_line(error)}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = formatting
