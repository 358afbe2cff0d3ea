"""What a task is: where its fields, labels and splits sit, how it encodes examples and scores predictions.

>>> task = get_task("rte", DataConfig(dir="/data/rte"))
>>> task.kind, task.num_labels, task.text_fields, task.main_metric
('classification', 2, ('sentence1', 'sentence2'), 'accuracy')
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .. import metrics
from ..errors import ConfigError
from ..registry import TASKS
from ..storage.reading import reading
from .config import DataConfig
from .packaged import PackagedArchive, fetch_archive, seeded_split
from .readers import DataError, Located, file_suffix, read_jsonl, read_parquet, read_tsv

HELD_OUT = "held_out"  # data.eval_split=held_out: evaluate on the training share data.validation_split holds out
SPLITS = ("train", "eval")
HubLoader = Callable[..., Iterable[dict]]  # loader(dataset_id, config_name, split=split) -> rows as dicts


@dataclass(frozen=True)
class HubDataset:
    """A dataset on the Hugging Face Hub: its id and its config (None when it has none)."""

    dataset_id: str
    config: str | None = None

    def __str__(self) -> str:
        return f"{self.dataset_id}[{self.config}]" if self.config else self.dataset_id


def read_hub_split(dataset: HubDataset, split: str, loader: HubLoader | None = None) -> Iterator[Located]:
    """Rows of one split (``datasets.load_dataset`` unless ``loader``), each tagged ``"<dataset> <split>, row N"``."""
    if loader is None:
        import datasets

        loader = datasets.load_dataset
    for number, row in enumerate(loader(dataset.dataset_id, dataset.config, split=split), start=1):
        yield f"{dataset} {split}, row {number}", dict(row)


@dataclass(frozen=True)
class Columns:
    """Where the text, the optional second text and the label sit in a source's records."""

    text: str
    text_pair: str | None = None
    label: str = "label"

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(name for name in (self.text, self.text_pair, self.label) if name is not None)


class Task:
    """What every task shares; ``files``: split name -> candidate paths in ``cfg.dir``, ``packaged_files``: its file."""

    name: ClassVar[str]
    kind: ClassVar[str]
    label_names: ClassVar[tuple[str, ...]] = ()
    text_fields: ClassVar[tuple[str, ...]]
    eval_split: ClassVar[str] = "validation"
    hub: ClassVar[HubDataset | None] = None
    files: ClassVar[dict[str, tuple[str, ...]]] = {}
    packaged_archive: ClassVar[PackagedArchive | None] = None
    packaged_files: ClassVar[dict[str, str]] = {}

    def __init__(self, cfg: DataConfig | None = None, hub_loader: HubLoader | None = None):
        self.cfg = cfg if cfg is not None else DataConfig()
        self.hub_loader = hub_loader

    @property
    def num_labels(self) -> int:
        return {"classification": len(self.label_names), "regression": 1}.get(self.kind, 0)

    @property
    def metric_names(self) -> tuple[str, ...]:
        return metrics.metric_names(self.name)

    @property
    def main_metric(self) -> str:
        return metrics.main_metric(self.name)

    @property
    def sources(self) -> tuple[str, ...]:
        available = {"files": bool(self.files), "hub": self.hub is not None, "packaged": bool(self.packaged_files)}
        return tuple(source for source, present in available.items() if present)

    def split_name(self, split: str) -> str:
        """The source split behind ``"train"`` or ``"eval"``."""
        if split not in SPLITS:
            raise ValueError(f"{self.name}: unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
        return "train" if split == "train" else self.cfg.eval_split or self.eval_split

    def load(self, split: str) -> list[dict]:
        """The examples of ``split`` (``"train"`` or ``"eval"``), capped to the first ``max_*_samples``."""
        if split == "eval" and self.cfg.eval_split == HELD_OUT:
            _, held_out = seeded_split(self.load("train"), self.cfg.validation_split, self.cfg.split_seed)
            return held_out[:self.cfg.max_eval_samples]
        split_name = self.split_name(split)
        self.check_source()
        cap = self.cfg.max_train_samples if split == "train" else self.cfg.max_eval_samples
        with closing(self.examples(split, split_name)) as examples:
            loaded = list(islice(examples, cap))
        if not loaded:
            raise DataError(f"{self.name}: the {split} split ({split_name}, source {self.cfg.source}) has no examples")
        if split == "train" and self.cfg.validation_split:
            check_validation_split(self.cfg.validation_split, len(loaded), f"in {self.source_of(split)}")
        return loaded

    def check_source(self) -> None:
        """Raise :class:`ConfigError` (one line naming this task's sources) when it cannot be read from ``source``."""
        if self.cfg.source not in self.sources:
            raise ConfigError(f"{self.name} cannot be read from data.source={self.cfg.source!r}; "
                              f"its sources: {', '.join(self.sources)}")

    @classmethod
    def check_data(cls, cfg: DataConfig) -> None:
        """Raise ValueError (one line) for data settings this task cannot use together, before anything is read."""

    def check_tokens(self, splits: dict[str, list[dict]], tokenizer: Callable[[], Any]) -> None:
        """Raise :class:`ConfigError` for settings these examples cannot be encoded with (``tokenizer()`` loads it)."""

    def source_of(self, split: str) -> str:
        """Where ``split`` is read from: the file's path, or the hub data set and split."""
        if split == "eval" and self.cfg.eval_split == HELD_OUT:
            return (f"{self.source_of('train')} (held out: data.validation_split={self.cfg.validation_split}, "
                    f"data.split_seed={self.cfg.split_seed})")
        split_name = self.split_name(split)
        return f"hub {self.hub} {split_name}" if self.cfg.source == "hub" else str(self.source_file(split, split_name))

    def examples(self, split: str, split_name: str) -> Iterator[dict]:
        """All examples of a split, in source order, bad records raising :class:`DataError`."""
        hub = self.cfg.source == "hub"
        records = self.read_hub(split_name) if hub else self.read_file(self.source_file(split, split_name))
        for located, record in records:
            if (example := self.to_example(located, record)) is not None:
                yield example

    def source_file(self, split: str, split_name: str) -> Path:
        """The file a split is read from: the packaged one, or :meth:`data_file`."""
        if self.cfg.source != "packaged":
            return self.data_file(split, split_name)
        if split_name not in self.packaged_files:
            raise ConfigError(f"{self.name}: the packaged source has no split {split_name!r}; "
                              f"choose one of: {', '.join(self.packaged_files)}")
        return fetch_archive(self.packaged_archive, self.cfg.resolved_cache_dir()) / self.packaged_files[split_name]

    def data_file(self, split: str, split_name: str) -> Path:
        """``cfg.train_file`` / ``cfg.eval_file`` (relative to ``cfg.dir``), else the first default that exists."""
        explicit = self.cfg.train_file if split == "train" else self.cfg.eval_file
        folder = Path(self.cfg.dir).expanduser() if self.cfg.dir else None
        if explicit:
            path = Path(explicit).expanduser()
            return path if path.is_absolute() or folder is None else folder / path
        if folder is None:
            raise ConfigError(f"{self.name}: data.source=files needs data.dir (the task's folder) or data.{split}_file")
        if split_name not in self.files:
            raise ConfigError(f"{self.name}: no default file for split {split_name!r}; known splits: "
                              f"{', '.join(self.files)}; or name the file with data.{split}_file")
        tried = [folder / name for candidate in self.files[split_name] for name in (candidate, candidate + ".gz")]
        with reading(folder, "data folder"):
            found = next((path for path in tried if path.is_file()), None)
        if found is not None:
            return found
        tried_names = ", ".join(str(path.relative_to(folder)) for path in tried)
        raise DataError(f"{self.name}: no {split_name} file in {folder}; tried {tried_names}; or name it with "
                        f"data.{split}_file")

    def read_hub(self, split_name: str) -> Iterator[Located]:
        return read_hub_split(self.hub, split_name, self.hub_loader)

    def read_file(self, path: Path) -> Iterator[Located]:
        raise NotImplementedError

    def to_example(self, located: str, record: dict) -> dict | None:
        """The example of one raw record, or None for records the task drops (e.g. no gold label)."""
        raise NotImplementedError

    def encode(self, examples: Sequence[dict], tokenizer: Any, train: bool = True) -> list[dict]:
        raise NotImplementedError

    def postprocess(self, examples: Sequence[dict], features: Sequence[dict], outputs: Any) -> tuple[list, list]:
        raise NotImplementedError

    def compute_metrics(self, predictions: Sequence, references: Sequence) -> dict[str, float]:
        return metrics.compute(self.name, predictions, references)


class TextTask(Task):
    """Classification or regression of one text or a text pair, located by ``hub_columns`` or ``table_columns``."""

    kind: ClassVar[str] = "classification"
    hub_columns: ClassVar[Columns | None] = None
    table_columns: ClassVar[Columns]
    headerless_columns: ClassVar[tuple[str, ...] | None] = None
    skip_malformed_rows: ClassVar[bool] = False
    dropped_labels: ClassVar[tuple] = ()
    label_range: ClassVar[tuple[float, float]] = (float("-inf"), float("inf"))

    @property
    def text_fields(self) -> tuple[str, ...]:
        return (self.hub_columns or self.table_columns).required[:-1]

    def read_hub(self, split_name: str) -> Iterator[Located]:
        return select_columns(super().read_hub(split_name), self.hub_columns)

    def read_file(self, path: Path) -> Iterator[Located]:
        suffix = file_suffix(path)
        if suffix == ".parquet":
            return select_columns(read_parquet(path), self.hub_columns)
        if suffix == ".jsonl":
            return select_columns(read_jsonl(path), self.table_columns)
        return self.read_table(path)

    def read_table(self, path: Path) -> Iterator[Located]:
        rows = read_tsv(path, self.table_columns.required, self.headerless_columns, self.skip_malformed_rows)
        return select_columns(rows, self.table_columns)

    def to_example(self, located: str, record: dict) -> dict | None:
        label = self.parse_label(located, record["label"])
        if label is None:
            return None
        pair = text_value(located, record["text_pair"]) if len(self.text_fields) == 2 else None
        return {"text": text_value(located, record["text"]), "text_pair": pair, "label": label}

    def parse_label(self, located: str, raw: Any) -> int | float | None:
        """The label id (classification) or value (regression) of a raw label; None if it is dropped."""
        if raw in self.dropped_labels:
            return None
        if self.kind == "regression":
            try:
                value = float(raw)
            except (TypeError, ValueError):
                value = float("nan")
            low, high = self.label_range
            if not low <= value <= high:
                raise DataError(f"{located}: score {raw!r} of {self.name} must be a number in [{low}, {high}]")
            return value
        if isinstance(raw, str) and raw.strip() in self.label_names:
            return self.label_names.index(raw.strip())
        label_id = int(raw) if isinstance(raw, str) and re.fullmatch(r"\s*-?\d+\s*", raw) else raw
        if isinstance(label_id, int) and not isinstance(label_id, bool) and 0 <= label_id < len(self.label_names):
            return label_id
        choices = ", ".join(f"{i}={name}" for i, name in enumerate(self.label_names))
        raise DataError(f"{located}: label {raw!r} is not in the label set of {self.name} ({choices})")

    def encode(self, examples: Sequence[dict], tokenizer: Any, train: bool = True) -> list[dict]:
        """Token ids truncated to ``cfg.max_length`` (unpadded) and ``labels``, one feature per example."""
        fields = ("text", "text_pair")[:len(self.text_fields)]
        return [{**feature, "labels": example["label"]}
                for feature, example in zip(encode_texts(examples, tokenizer, self.cfg.max_length, fields), examples)]

    def postprocess(self, examples: Sequence[dict], features: Sequence[dict], outputs: Any) -> tuple[list, list]:
        """Predicted label ids (argmax of logits ``(n, num_labels)``) or scores (``(n, 1)``), and the gold labels."""
        logits = np.asarray(outputs, dtype=np.float64)
        if logits.shape != (len(examples), self.num_labels):
            raise ValueError(f"{self.name}: outputs of shape {logits.shape}, "
                             f"expected ({len(examples)}, {self.num_labels})")
        predictions = logits[:, 0].tolist() if self.kind == "regression" else logits.argmax(axis=1).tolist()
        return predictions, [example["label"] for example in examples]


def check_validation_split(split: float, train_count: int, counted: str) -> None:
    """Refuse a ``data.validation_split`` holding out none or all of ``train_count`` examples (``counted``: whose)."""
    held_out = round(split * train_count)
    if 0 < held_out < train_count:
        return
    if train_count < 2:
        raise ConfigError(f"data.validation_split={split} needs 2 or more training examples (one held out, one to "
                          f"train on); there is {train_count} {counted}; set data.validation_split=0")
    if held_out == 0:
        raise ConfigError(f"data.validation_split={split} holds out none of the {train_count} training examples "
                          f"{counted} (round({split} x {train_count}) = 0); the smallest split that holds one out is "
                          f"{working_split(train_count, smallest=True)}")
    raise ConfigError(f"data.validation_split={split} holds out all {train_count} training examples {counted} "
                      f"(round({split} x {train_count}) = {held_out}), leaving none to train on; the largest split "
                      f"that leaves one is {working_split(train_count, smallest=False)}")


def working_split(train_count: int, smallest: bool) -> float:
    """The smallest (or largest) validation split that holds out and leaves one or more of ``train_count`` examples."""
    decimals = 1 - math.floor(math.log10(0.5 / train_count))
    units = math.floor(0.5 / train_count * 10 ** decimals) if smallest else math.ceil(
        (1 - 0.5 / train_count) * 10 ** decimals)
    while not 0 < round(round(units * 10.0 ** -decimals, decimals) * train_count) < train_count:
        units += 1 if smallest else -1
    return round(units * 10.0 ** -decimals, decimals)


def clip_text(text: str, tokenizer: Any, max_length: int) -> str:
    """``text``, or for a very long one a prefix cut at a space that still holds more than ``max_length`` tokens."""
    budget = 32 * max_length  # characters: a text longer than 32 per token is clipped first
    while len(text) > budget:
        space = text.rfind(" ", 0, budget)
        prefix = text[: space if space > budget // 2 else budget]
        if len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) > max_length + 16:
            return prefix
        budget *= 4
    return text


def encode_texts(examples: Sequence[dict], tokenizer: Any, max_length: int, fields: Sequence[str]) -> list[dict]:
    """Token ids of each example's ``fields`` (a text or a text pair) cut at ``max_length``, one dict per example."""
    if not examples:
        return []
    texts = [[clip_text(example[field], tokenizer, max_length) for example in examples] for field in fields]
    encoded = tokenizer(*texts, truncation=True, max_length=max_length)
    return [{key: values[index] for key, values in encoded.items()} for index in range(len(examples))]


def select_columns(rows: Iterator[Located], columns: Columns) -> Iterator[Located]:
    """Records ``{"text", "text_pair", "label"}`` picked out of source rows by ``columns``."""
    for located, row in rows:
        if missing := [name for name in columns.required if name not in row]:
            raise DataError(f"{located}: missing column(s) {', '.join(missing)}; found {', '.join(map(str, row))}")
        yield located, {"text": row[columns.text], "text_pair": row[columns.text_pair] if columns.text_pair else None,
                        "label": row[columns.label]}


def text_value(located: str, value: Any, strip: bool = True) -> str:
    if not isinstance(value, str):
        raise DataError(f"{located}: expected text, found {value!r}")
    return value.strip() if strip else value


def register_task(name: str):
    """Register a task class under ``name`` (also its ``name`` attribute) with :class:`DataConfig`."""

    def decorator(cls: type) -> type:
        cls.name = name
        return TASKS.register(name, DataConfig)(cls)

    return decorator


def get_task(name: str, cfg: DataConfig | None = None, **kwargs: Any) -> Task:
    """The task registered as ``name``; unknown names raise KeyError listing the known ones."""
    return TASKS.build(name, cfg, **kwargs)
