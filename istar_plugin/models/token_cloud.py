"""The token cloud of a Hugging Face model's hidden states (padding excluded), and :class:`TokenCloudSurface`.

>>> states = (torch.zeros(2, 3, 4), torch.ones(2, 3, 4))
>>> batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])}
>>> mask = attention_mask_or_ones(batch)
>>> [c.shape for c in token_cloud(states, mask)], [c.shape for c in token_cloud(states, mask, include_padding=True)]
([torch.Size([3, 4])], [torch.Size([6, 4])])
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Iterable, Mapping, Optional, Sequence

import torch
from torch import Tensor

from ..isotropy.streaming import LayerStatistics, stream
from .preflight import hidden_size, num_layers


def attention_mask_or_ones(inputs: Mapping[str, Tensor]) -> Tensor:
    """The batch's attention mask; a batch without one has no padding (every position is a token)."""
    mask = inputs.get("attention_mask")
    return torch.ones_like(inputs["input_ids"]) if mask is None else mask


def token_cloud(hidden_states: Sequence[Tensor], attention_mask: Optional[Tensor],
                layers: Optional[Sequence[int]] = None, positions: Optional[Tensor] = None,
                include_padding: bool = False) -> list[Tensor]:
    """One (n_tokens, hidden) tensor of the tokens ``attention_mask`` keeps (None: packed, every position) per hidden
    state ``layers`` selects (0 = embeddings; None: 1..L); ``include_padding``: every position is a point."""
    count = len(hidden_states)
    indices = range(1, count) if layers is None else [_check_layer(index, count) for index in layers]
    if attention_mask is None:
        if include_padding:
            raise ValueError("a padding-free batch has no padded positions to include: a criterion scoring them "
                             "(criterion.padding=include) needs padded batches (model.padding_free=false)")
        return [_flat(hidden_states[index]) for index in indices]
    if include_padding:
        positions = torch.arange(attention_mask.numel(), device=attention_mask.device)
    elif positions is None:
        positions = attention_mask.reshape(-1).bool().nonzero().squeeze(1)
    return [_flat(hidden_states[index]).index_select(0, positions) for index in indices]


def padded_token_cloud(model, output, layers: Optional[Sequence[int]], include_padding: bool) -> list[Tensor]:
    """``model.token_cloud(output, layers)``, passing ``include_padding`` only when it is asked for."""
    return model.token_cloud(output, layers, **({"include_padding": True} if include_padding else {}))


@torch.no_grad()
def stream_token_statistics(model, batches: Iterable[Mapping[str, Tensor]], statistics: LayerStatistics, *,
                            layers: Optional[Sequence[int]] = None, include_padding: bool = False,
                            cloud: Optional[Callable[[Any, Any], Sequence[Tensor]]] = None,
                            autocast: Callable[[], ContextManager] = contextlib.nullcontext,
                            on_output: Optional[Callable[[Mapping[str, Tensor], Any], None]] = None,
                            progress: Optional[Callable[[int], object]] = None) -> LayerStatistics:
    """Stream the token clouds (or ``cloud(model, output)``) of ``model``'s forward on each batch into statistics."""
    def clouds(batch):
        with autocast():
            output = model(batch)
        if on_output is not None:
            on_output(batch, output)
        return cloud(model, output) if cloud is not None else padded_token_cloud(model, output, layers, include_padding)

    return stream(statistics, batches, clouds, progress)


class TokenCloudSurface:
    """What criterions and hooks read of a model wrapping a Hugging Face model as ``self.model``."""

    model: Any

    @property
    def hidden_size(self) -> int:
        return hidden_size(self.model.config)

    @property
    def num_layers(self) -> int:
        return num_layers(self.model.config)

    def token_cloud(self, output, layers: Optional[Sequence[int]] = None,
                    include_padding: bool = False) -> list[Tensor]:
        """:func:`token_cloud` of ``output``'s hidden states."""
        return token_cloud(output.hidden_states, output.attention_mask, layers,
                           positions=getattr(output, "token_positions", None), include_padding=include_padding)

    def last_layer_tokens(self, output) -> Tensor:
        """The last layer's non-padding tokens, (n_tokens, hidden)."""
        return self.token_cloud(output, [-1])[0]

    def word_embeddings(self) -> Tensor:
        """The word-embedding matrix (vocabulary x embedding size), the parameter itself."""
        embeddings = self.model.get_input_embeddings()
        if embeddings is None or not isinstance(getattr(embeddings, "weight", None), Tensor):
            raise ValueError(f"{type(self.model).__name__} exposes no word-embedding matrix")
        return embeddings.weight


def _check_layer(index: int, count: int) -> int:
    if isinstance(index, bool) or not isinstance(index, int) or not -count <= index < count:
        raise ValueError(
            f"layer index {index!r} out of range: hidden_states has {count} entries "
            f"(0 = embeddings, 1..{count - 1} = transformer layers), valid indices {-count}..{count - 1}"
        )
    return index


def _flat(hidden: Tensor) -> Tensor:
    return hidden.reshape(-1, hidden.shape[-1])
