"""Loading a Hugging Face model and its tokenizer: one plain stderr line instead of transformers' load report, a
damaged ``.safetensors`` file (a truncated file or a damaged header) named in one ``ModelError`` line."""
from __future__ import annotations

import contextlib
import contextvars
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

from safetensors import SafetensorError, safe_open
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from ..errors import ModelError, one_line
from .config import ModelConfig
from .paths import gguf_options, resolve_model_path

_WEIGHTS_RESTORED_LATER = contextvars.ContextVar("weights_restored_later", default=False)


@contextlib.contextmanager
def restoring_weights() -> Iterator[None]:
    """Models built inside print no load report: their weights, a fresh head's included, come from a checkpoint."""
    token = _WEIGHTS_RESTORED_LATER.set(True)
    try:
        yield
    finally:
        _WEIGHTS_RESTORED_LATER.reset(token)


def load_pretrained(auto_class, path: str, **kwargs):
    """``auto_class.from_pretrained`` with its load report replaced by one stderr line."""
    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        with _no_gguf_bar() if kwargs.get("gguf_file") else contextlib.nullcontext():
            model, info = auto_class.from_pretrained(path, output_loading_info=True, **kwargs)
    except SafetensorError as error:
        raise damaged_weights(path, error, kwargs.get("revision")) from None
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    fresh, unused = sorted(info.get("missing_keys", ())), info.get("unexpected_keys", ())
    mismatched = [str(key[0] if isinstance(key, tuple) else key) for key in info.get("mismatched_keys", ())]
    if (fresh or unused or mismatched) and not _WEIGHTS_RESTORED_LATER.get():
        parts = [f"newly initialised: {', '.join(fresh) or 'none'}", f"{len(unused)} unused checkpoint tensor(s)"]
        if mismatched:
            parts.append(f"re-initialised for a new shape: {', '.join(mismatched)}")
        source = Path(path, kwargs["gguf_file"]) if kwargs.get("gguf_file") else path
        print(f"{type(model).__name__} from {source}: {'; '.join(parts)}", file=sys.stderr)
    return model


@contextlib.contextmanager
def _no_gguf_bar() -> Iterator[None]:
    """No tqdm bar while transformers dequantises a GGUF file (it ignores its progress-bar setting there)."""
    from functools import partial

    from tqdm.auto import tqdm
    from transformers import modeling_gguf_pytorch_utils as gguf_loading

    drawn = gguf_loading.tqdm
    gguf_loading.tqdm = partial(tqdm, disable=True)
    try:
        yield
    finally:
        gguf_loading.tqdm = drawn


def load_tokenizer(cfg: ModelConfig) -> Any:
    """The fast tokenizer of ``cfg``'s model (a slow one where there is none), without the model's weights."""
    folder, options = gguf_options(resolve_model_path(cfg.name_or_path))
    return AutoTokenizer.from_pretrained(folder, use_fast=True, revision=cfg.revision,
                                         local_files_only=cfg.local_files_only, **options)


def pad_with_eos(tokenizer) -> None:
    """Pad a decoder's batches with its end-of-text token, so a head's last non-padding token is the last real one."""
    if tokenizer.eos_token is None:
        raise ValueError(f"{type(tokenizer).__name__} has neither a pad nor an end-of-text token to pad batches with")
    tokenizer.pad_token = tokenizer.eos_token


def damaged_weights(name_or_path: str, error: SafetensorError, revision: Optional[str] = None) -> ModelError:
    """The error for ``name_or_path`` having met ``error``, naming the first weights file safetensors refuses."""
    if Path(name_or_path).is_dir():
        files = sorted(Path(name_or_path).glob("*.safetensors"))
    else:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name_or_path, "model.safetensors", revision=revision)
        files = [Path(cached)] if isinstance(cached, str) else []
    damaged = next((path for path in files if _refused(path)), None)
    where = f"its weights file {damaged}" if damaged else "its weights (.safetensors)"
    return ModelError(f"model {name_or_path}: {where} is damaged ({one_line(error)}); re-download "
                      "the model, or re-export it if istar-export or a run wrote it")


def _refused(path: Path) -> bool:
    try:
        with safe_open(str(path), framework="pt"):
            return False
    except (SafetensorError, OSError):
        return True
