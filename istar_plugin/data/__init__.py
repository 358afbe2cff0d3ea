"""The data layer: the ``data`` config, the tasks (:mod:`.tasks`), their readers, sources and SQuAD features."""
from .config import DataConfig
from .readers import DataError

__all__ = ["DataConfig", "DataError"]
