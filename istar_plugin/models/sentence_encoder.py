"""Sentence embeddings from any Hugging Face backbone: one pooled vector per sentence for each requested layer
(``first_last_mean``: Su et al. 2021's "first-last avg"; ``last_token``: the last real token, for decoders)."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor
from transformers import AutoModel, AutoTokenizer

from .loading import load_pretrained, pad_with_eos
from .paths import gguf_options
from .packing import Packing
from .preflight import num_layers

POOLINGS = ("mean", "cls", "first_last_mean", "last_token")


def pool(states: Tensor, mask: Tensor, pooling: str, first: Optional[Tensor] = None) -> Tensor:
    """(batch, d) sentence vectors from one layer's (batch, length, d) states (``first``: layer 1's)."""
    mask = mask.to(states.dtype)
    if pooling == "cls":
        return states[:, 0]
    if pooling == "last_token":
        positions = mask * torch.arange(1, mask.shape[1] + 1, device=mask.device, dtype=mask.dtype)
        return states[torch.arange(states.shape[0], device=states.device), positions.argmax(dim=1)]
    means = (states * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp_min(1)
    if pooling == "mean":
        return means
    if pooling == "first_last_mean":
        if first is None:
            raise ValueError("first_last_mean pooling needs the first transformer layer's states")
        return (pool(first, mask, "mean") + means) / 2
    raise ValueError(f"unknown pooling {pooling!r}; choices: {', '.join(POOLINGS)}")


Pack = Callable[[dict[str, Tensor]], tuple[dict[str, Any], Packing]]


class SentenceEncoder:
    """A backbone (hidden states out) and its tokenizer, in eval mode; given ``pack``, each batch runs packed."""

    def __init__(self, backbone: torch.nn.Module, tokenizer, max_length: int = 128, source: str = "",
                 pack: Optional[Pack] = None):
        self.backbone, self.tokenizer, self.max_length, self.source = backbone.eval(), tokenizer, max_length, source
        self.pack = pack
        if self.tokenizer.pad_token is None:
            pad_with_eos(self.tokenizer)

    @classmethod
    def from_pretrained(cls, path: str, max_length: int = 128, local_files_only: bool = False) -> "SentenceEncoder":
        """Any Hugging Face folder or hub name, or a GGUF file (``.gguf``: dequantised to full precision)."""
        folder, options = gguf_options(path)
        backbone = load_pretrained(AutoModel, folder, local_files_only=local_files_only, **options)
        tokenizer = AutoTokenizer.from_pretrained(folder, use_fast=True, local_files_only=local_files_only, **options)
        return cls(backbone, tokenizer, max_length, source=path)

    def layer_index(self, layer: int) -> int:
        """``layer`` as an index into the hidden states (0..L); out of range is a one-line ValueError."""
        count = num_layers(self.backbone.config)
        if not -count - 1 <= layer <= count:
            raise ValueError(f"layer {layer} is outside the model's hidden states: 0 (embeddings) to {count}, "
                             "or -1 for the last")
        return layer % (count + 1)

    @torch.no_grad()
    def encode(self, sentences: Sequence[str], pooling: str = "mean", layers: Sequence[int] = (-1,),
               batch_size: int = 64, progress=None) -> dict[int, Tensor]:
        """``{layer: (n, d) float32}`` for each of ``layers``, rows in the order of ``sentences``."""
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; choices: {', '.join(POOLINGS)}")
        indices = [self.layer_index(layer) for layer in layers]
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        device = next(self.backbone.parameters()).device
        pooled: dict[int, list[Tensor]] = {index: [] for index in indices}
        for start in range(0, len(order), batch_size):
            batch = [sentences[i] for i in order[start : start + batch_size]]
            inputs = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length,
                                    return_tensors="pt").to(device)
            states = self._hidden_states(inputs)
            for index in indices:
                pooled[index].append(pool(states[index].float(), inputs["attention_mask"], pooling,
                                          first=states[1].float()).cpu())
            if progress is not None:
                progress(len(batch))
        restore = torch.tensor(order, dtype=torch.long).argsort()  # the inverse permutation
        return {index: torch.cat(chunks)[restore] for index, chunks in pooled.items()}

    def _hidden_states(self, inputs: dict[str, Tensor]) -> tuple[Tensor, ...]:
        """Every hidden state of a padded batch, (batch, length, d) each (a packed row's put back at their places)."""
        if self.pack is None:
            return self.backbone(**inputs, output_hidden_states=True).hidden_states
        packed, packing = self.pack(inputs)
        states = self.backbone(**packed, output_hidden_states=True).hidden_states
        return tuple(packing.unpack(state[0]) for state in states)
