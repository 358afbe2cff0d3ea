"""The console scripts, one module each: ``istar-run`` (:mod:`.run`), ``istar-grid`` (:mod:`.grid`),
``istar-report`` (:mod:`.report`), ``istar-export`` (:mod:`.export`), ``istar-analyze`` (:mod:`.analyze`),
``istar-embed`` (:mod:`.embed`) and ``istar-tune`` (:mod:`.tune`).

``python -m istar_plugin.cli ARGS`` is ``istar-run ARGS``; ``python -m istar_plugin.cli.grid ARGS`` is
``istar-grid ARGS``, and so on.
"""
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
