"""The console scripts, ``istar-NAME`` in module NAME (run, grid, report, export, analyze, embed, tune), and the
parser and environment they share; ``python -m istar_plugin.cli.NAME ARGS`` is ``istar-NAME ARGS`` (``python -m
istar_plugin.cli``: istar-run)."""
import argparse
import os


def set_environment() -> None:
    """Set, before torch is imported, what the environment does not set (its children inherit it)."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def command_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A console script's parser, ``description`` (its module's docstring) as written; the environment set first."""
    set_environment()
    return argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
