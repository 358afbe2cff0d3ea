"""The console scripts, one module each: ``istar-run`` (:mod:`.run`), ``istar-grid`` (:mod:`.grid`),
``istar-report`` (:mod:`.report`), ``istar-export`` (:mod:`.export`), ``istar-analyze`` (:mod:`.analyze`),
``istar-embed`` (:mod:`.embed`) and ``istar-tune`` (:mod:`.tune`).

``python -m istar_plugin.cli ARGS`` is ``istar-run ARGS``; ``python -m istar_plugin.cli.grid ARGS`` is
``istar-grid ARGS``, and so on.
"""
import os

ENVIRONMENT = {"THP_MEM_ALLOC_ENABLE": "1"}
"""What each console script sets, unless the environment sets it, before torch is imported: PyTorch's transparent
huge pages for CPU tensors of 2 MB and more (``THP_MEM_ALLOC_ENABLE=0`` turns it off). Child processes inherit it."""


def set_environment() -> None:
    """Set :data:`ENVIRONMENT`'s values the environment does not set; each console script's ``main`` calls it first."""
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
