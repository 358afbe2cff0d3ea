"""A model's ``.safetensors`` weights that safetensors refuses (cut short, a damaged header): one
:class:`~istar_plugin.errors.ModelError` line naming the file, instead of safetensors' traceback.

safetensors checks the header and that the tensors cover the file exactly, so a truncated file or a damaged header
is caught; the format has no checksum, so bytes changed inside the tensor data load as they are, undetected.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "model.safetensors").write_bytes(b"\\x00" * 100)
>>> error = damaged_weights(str(folder), SafetensorError("Error while deserializing header: invalid header length"))
>>> str(error).replace(str(folder), "FOLDER")  # doctest: +NORMALIZE_WHITESPACE
'model FOLDER: its weights file FOLDER/model.safetensors is damaged (Error while deserializing header: invalid
header length); re-download the model, or re-export it if istar-export or a run wrote it'
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from safetensors import SafetensorError, safe_open

from ..errors import ModelError

__all__ = ["SafetensorError", "damaged_weights"]


def damaged_weights(name_or_path: str, error: SafetensorError, revision: Optional[str] = None) -> ModelError:
    """The error to raise when loading ``name_or_path`` (a folder or a hub id) met ``error``: it names the first
    weights file safetensors refuses (in the folder, or the hub cache's ``model.safetensors``), else the model."""
    damaged = next((path for path in _weight_files(name_or_path, revision) if _refused(path)), None)
    where = f"its weights file {damaged}" if damaged else "its weights (.safetensors)"
    return ModelError(f"model {name_or_path}: {where} is damaged ({' '.join(str(error).split())}); re-download "
                      "the model, or re-export it if istar-export or a run wrote it")


def _weight_files(name_or_path: str, revision: Optional[str]) -> list[Path]:
    folder = Path(name_or_path)
    if folder.is_dir():
        return sorted(folder.glob("*.safetensors"))
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name_or_path, "model.safetensors", revision=revision)
    return [Path(cached)] if isinstance(cached, str) else []


def _refused(path: Path) -> bool:
    """Whether safetensors refuses to open ``path`` (it reads the header and checks the file's length)."""
    try:
        with safe_open(str(path), framework="pt"):
            return False
    except (SafetensorError, OSError):
        return True
