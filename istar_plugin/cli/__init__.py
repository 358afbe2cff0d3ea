"""The console scripts, one module each: ``istar-run`` (:mod:`.run`), ``istar-grid`` (:mod:`.grid`),
``istar-report`` (:mod:`.report`), ``istar-export`` (:mod:`.export`), ``istar-analyze`` (:mod:`.analyze`),
``istar-embed`` (:mod:`.embed`) and ``istar-tune`` (:mod:`.tune`).

``python -m istar_plugin.cli ARGS`` is ``istar-run ARGS``; ``python -m istar_plugin.cli.grid ARGS`` is
``istar-grid ARGS``, and so on.
"""
import os

ENVIRONMENT = {"THP_MEM_ALLOC_ENABLE": "1"}
"""What each console script sets before torch is imported, unless the environment sets it (children inherit it)."""


def set_environment() -> None:
    """Set :data:`ENVIRONMENT`'s values the environment does not set."""
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
