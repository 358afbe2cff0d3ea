"""Rows of a Hugging Face Hub dataset split, through ``datasets.load_dataset`` or a stand-in loader.

>>> fake = lambda dataset_id, config, split: [{"sentence": "fine", "label": 1}]
>>> list(read_hub_split(HubDataset("nyu-mll/glue", "sst2"), "train", loader=fake))
[('nyu-mll/glue[sst2] train, row 1', {'sentence': 'fine', 'label': 1})]
"""

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
    rows = (loader or load_dataset)(dataset.dataset_id, dataset.config, split=split)
    for number, row in enumerate(rows, start=1):
        yield f"{dataset} {split}, row {number}", dict(row)


def load_dataset(dataset_id: str, config: str | None, split: str) -> Iterable[dict]:
    """``datasets.load_dataset`` (imported only when the hub is really used)."""
    import datasets

    return datasets.load_dataset(dataset_id, config, split=split)
