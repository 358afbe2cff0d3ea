"""Compatibility shim: ``istar_plugin.cell.CellRunner`` now lives in :mod:`istar_plugin.launch.cell`.

SLURM jobs queued or requeued by submitit before the package was laid out in layers hold a pickled
``istar_plugin.cell.CellRunner``; this name keeps them loadable. New code imports from ``istar_plugin.launch.cell``.
"""
from .launch.cell import CellRunner

__all__ = ["CellRunner"]
