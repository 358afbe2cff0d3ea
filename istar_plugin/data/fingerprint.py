"""What a run read: each split's source and a SHA-256 of its examples, so that a run resumed on changed data fails."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence


def split_fingerprint(examples: Sequence[dict], source: str) -> dict[str, Any]:
    """``source``, the number of ``examples`` and their ``sha256``; a file's ``size`` and ``mtime`` too."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(json.dumps(example, sort_keys=True, default=str, ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    record: dict[str, Any] = {"source": source, "examples": len(examples), "sha256": digest.hexdigest()}
    if os.path.isfile(source):
        stat = Path(source).stat()
        record.update(size=stat.st_size, mtime=stat.st_mtime)
    return record


def changed_splits(saved: dict[str, dict], current: dict[str, dict]) -> list[str]:
    """One phrase per split of both ``saved`` and ``current`` whose examples differ."""
    changed = []
    for split in sorted(set(saved) & set(current)):
        then, now = saved[split], current[split]
        if then.get("sha256") != now.get("sha256"):
            where = (now["source"] if then.get("source") == now["source"]
                     else f"{then.get('source')} then, {now['source']} now")
            changed.append(f"{split} ({where}: {then.get('examples')} examples then, {now['examples']} now, "
                           "their content differs)")
    return changed
