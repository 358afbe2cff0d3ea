"""Where a finished cell ran: the host, CPU, torch, precision and code commit its ``results.json`` records
(:mod:`istar_plugin.storage.provenance`). A run from before these were recorded gives the host of its last attempt
(a grid cell's ``attempts.jsonl``) and its precision; what it did not record is None, shown as not recorded.

>>> import json, tempfile
>>> cell = Path(tempfile.mkdtemp())
>>> _ = (cell / "results.json").write_text(json.dumps({"task": "rte", "model": "m", "criterion": {}, "seed": 1,
...     "precision": "bf16", "provenance": {"host": "n1", "cpu": "AMD EPYC", "cpu_flags": ["avx512_bf16"],
...                                         "torch": "2.13.0", "commit": "a0ee4f8"}}))
>>> cell_provenance(cell)
Provenance(host='n1', cpu='AMD EPYC', cpu_flags=('avx512_bf16',), torch='2.13.0', precision='bf16', commit='a0ee4f8')
>>> cell_provenance(cell.parent / "no such cell")
Provenance(host=None, cpu=None, cpu_flags=None, torch=None, precision=None, commit=None)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...storage.provenance import PROVENANCE
from ...storage.results import ResultsError, read_results
from .run_logs import attempt_host

__all__ = ["Provenance", "cell_provenance"]


@dataclass(frozen=True)
class Provenance:
    """What a cell recorded of where it ran; None: not recorded."""

    host: Optional[str] = None
    cpu: Optional[str] = None
    cpu_flags: Optional[tuple[str, ...]] = None  # which of storage.provenance.CPU_FLAGS the CPU has
    torch: Optional[str] = None
    precision: Optional[str] = None
    commit: Optional[str] = None


def cell_provenance(cell: Path) -> Provenance:
    """The provenance ``cell``'s ``results.json`` records (empty when it has none readable)."""
    try:
        results = read_results(Path(cell))
    except ResultsError:
        return Provenance()
    recorded = results.extra.get(PROVENANCE)
    recorded = recorded if isinstance(recorded, dict) else {}
    flags = recorded.get("cpu_flags")
    return Provenance(host=recorded.get("host") or attempt_host(Path(cell)), cpu=recorded.get("cpu"),
                      cpu_flags=None if flags is None else tuple(flags), torch=recorded.get("torch"),
                      precision=results.extra.get("precision"), commit=recorded.get("commit"))
