"""Run configuration: recipes (YAML), the declared keys, composition from the command line with OmegaConf, its
validation, and the typed views the trainer reads; importing it needs no torch.

>>> cfg = compose(["recipe=movie_snippets", "criterion=istar", "criterion.lam=-2"])
>>> cfg.task, cfg.criterion.name, cfg.criterion.lam, cfg.model.name
('movie_snippets', 'istar', -2.0, 'minilm')
"""
from ..errors import ConfigError
from .composition import compose
from .key_help import declared_keys, describe_key, model_choices
from .recipes import available, find_yaml, load_yaml
from .schema import ADDED_KEYS, PRECISION_CHOICES, PRECISIONS, OptimConfig, RunConfig, as_configured_today
from .views import criterion_config, data_config, model_config, to_yaml

__all__ = ["ConfigError", "compose", "declared_keys", "describe_key", "model_choices", "ADDED_KEYS",
           "as_configured_today", "available", "find_yaml", "load_yaml", "PRECISION_CHOICES", "PRECISIONS",
           "OptimConfig", "RunConfig", "criterion_config", "data_config", "model_config", "to_yaml"]
