"""The data layer behind :mod:`istar_plugin.data.tasks`: the ``data`` config, file-layout readers, the hub and
packaged sources, and SQuAD feature preparation."""
from .config import DataConfig
from .readers import DataError

__all__ = ["DataConfig", "DataError"]
