"""Runs written before a key existed: :data:`ADDED_KEYS` holds each key added since, at the value that does what
those runs did, and :func:`as_configured_today` reads an older run's config as a config written today would say it.

>>> ADDED_KEYS["engine"], ADDED_KEYS["model.lora.r"]
('istar', 0)
"""
from __future__ import annotations

from typing import Any, Optional

from ..models.config import ModelConfig
from ..settings import added_keys
from .schema import RunConfig

ADDED_KEYS: dict[str, Any] = {**added_keys(RunConfig), **added_keys(ModelConfig, "model.")}
"""Each key added since older runs were written, at the value that does what those runs did."""


def as_configured_today(flat: dict[str, Any], used_precision: Optional[str] = None) -> dict[str, Any]:
    """A run's flat config as written today: :data:`ADDED_KEYS` it lacks filled in, ``precision=auto`` as used."""
    today = {**ADDED_KEYS, **flat}
    if used_precision is not None and today.get("precision") == "auto":
        today["precision"] = used_precision
    return today
