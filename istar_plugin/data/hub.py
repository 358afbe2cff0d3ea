"""Rows of a Hugging Face Hub dataset split, through ``datasets.load_dataset`` or a stand-in loader."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from .readers import Located

HubLoader = Callable[..., Iterable[dict]]  # loader(dataset_id, config_name, split=split) -> rows as dicts


@dataclass(frozen=True)
class HubDataset:
    """A dataset on the hub: its id and its config (None when it has none)."""

    dataset_id: str
    config: str | None = None

    def __str__(self) -> str:
        return f"{self.dataset_id}[{self.config}]" if self.config else self.dataset_id


def read_hub_split(dataset: HubDataset, split: str, loader: HubLoader | None = None) -> Iterator[Located]:
    """Rows of one split, each tagged ``"<dataset>[<config>] <split>, row N"``."""
    if loader is None:
        import datasets

        loader = datasets.load_dataset
    for number, row in enumerate(loader(dataset.dataset_id, dataset.config, split=split), start=1):
        yield f"{dataset} {split}, row {number}", dict(row)
