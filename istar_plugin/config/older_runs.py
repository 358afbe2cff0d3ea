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
"""Config keys added after runs were written without them, each with the value that does what those runs did: a
run directory whose config lacks such a key and a config holding that value describe the same run (a grid resumes
it). A new key must default to the old behaviour and be declared ``setting(..., added=True)``
(``tests/test_compatibility.py``)."""


def as_configured_today(flat: dict[str, Any], used_precision: Optional[str] = None) -> dict[str, Any]:
    """A run's flat config (dotted keys) as a config written today would say it: each key of :data:`ADDED_KEYS` it
    lacks at its old-behaviour value, and ``precision=auto`` as the precision the run used, when known.

    >>> as_configured_today({"seed": 1, "precision": "auto"}, used_precision="fp32")["precision"]
    'fp32'
    >>> as_configured_today({"seed": 1})["model.lora.r"]
    0
    """
    today = {**ADDED_KEYS, **flat}
    if used_precision is not None and today.get("precision") == "auto":
        today["precision"] = used_precision
    return today
