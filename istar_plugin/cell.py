"""Compatibility shim: ``istar_plugin.cell.CellRunner`` is :class:`istar_plugin.launch.cell.CellRunner`, the path
SLURM jobs queued by submitit hold pickled; new code imports from :mod:`istar_plugin.launch.cell`."""
from .launch.cell import CellRunner

__all__ = ["CellRunner"]
