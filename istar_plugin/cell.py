"""``istar_plugin.launch.cell.CellRunner`` at the path that queued SLURM jobs hold pickled."""
from .launch.cell import CellRunner

__all__ = ["CellRunner"]
