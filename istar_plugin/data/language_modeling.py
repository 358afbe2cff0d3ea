"""Language modelling (task ``lm``): next-token prediction on texts of files, the hub or another task; perplexity."""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..errors import ConfigError
from .config import DataConfig
from .readers import DataError, Located, file_suffix, numbered_lines, read_jsonl, where
from .task import HubDataset, Task, TextTask, encode_texts, get_task, read_hub_split, register_task, text_value


@register_task("lm")
class LanguageModeling(Task):
    """Next-token loss on every real token of each text; ``perplexity`` and ``nll_per_token`` on the eval split."""

    kind = "language_modeling"
    text_fields = ("text",)

    def __init__(self, cfg: Optional[DataConfig] = None, hub_loader=None):
        super().__init__(cfg, hub_loader)
        self.text_task: Optional[TextTask] = None
        if not self.cfg.text_from:
            return
        if self.cfg.text_from == self.name:
            raise ConfigError("data.text_from=lm names this task itself; name a task whose texts to model, e.g. sst2")
        try:
            self.text_task = get_task(self.cfg.text_from, self.cfg, hub_loader=self.hub_loader)
        except KeyError as error:
            raise ConfigError(f"data.text_from: {error.args[0]}") from None
        if not isinstance(self.text_task, TextTask):
            raise ConfigError(f"data.text_from={self.cfg.text_from}: its kind is {self.text_task.kind}; name a "
                              "classification or regression task (its texts are single sentences or pairs)")

    @property
    def sources(self) -> tuple[str, ...]:
        return self.text_task.sources if self.text_task else ("files", "hub")

    def split_name(self, split: str) -> str:
        return self.text_task.split_name(split) if self.text_task else super().split_name(split)

    def source_of(self, split: str) -> str:
        if self.text_task:
            return f"the texts of {self.text_task.name}: {self.text_task.source_of(split)}"
        return super().source_of(split)

    def examples(self, split: str, split_name: str) -> Iterator[dict]:
        if self.text_task is None:
            yield from super().examples(split, split_name)
            return
        for example in self.text_task.examples(split, split_name):
            yield from ({"text": text} for text in (example["text"], example["text_pair"]) if text)

    def data_file(self, split: str, split_name: str) -> Path:
        explicit = self.cfg.train_file if split == "train" else self.cfg.eval_file
        if not explicit:
            raise ConfigError(f"lm: name the {split} texts with data.{split}_file (a .txt, one text per line, or a "
                              ".jsonl with a text field), or take a task's texts with data.text_from (e.g. sst2)")
        return super().data_file(split, split_name)

    def read_file(self, path: Path) -> Iterator[Located]:
        suffix = file_suffix(path)
        if suffix == ".jsonl":
            return read_jsonl(path)
        if suffix == ".txt":
            return ((where(path, number), {"text": line.rstrip("\r\n")}) for number, line in numbered_lines(path))
        raise DataError(f"{path}: lm reads .txt or .jsonl files, not {suffix or 'a file without suffix'}")

    def read_hub(self, split_name: str) -> Iterator[Located]:
        if not self.cfg.hub_dataset:
            raise ConfigError("lm with data.source=hub needs data.hub_dataset=NAME or NAME:CONFIG "
                              "(e.g. Salesforce/wikitext:wikitext-2-raw-v1), whose rows have a text column")
        name, _, config = self.cfg.hub_dataset.partition(":")
        return read_hub_split(HubDataset(name, config or None), split_name, self.hub_loader)

    def to_example(self, located: str, record: dict) -> Optional[dict]:
        if "text" not in record:
            raise DataError(f"{located}: no text field; found {', '.join(map(str, record)) or 'nothing'}")
        text = text_value(located, record["text"])
        return {"text": text} if text else None

    def encode(self, examples: Sequence[dict], tokenizer: Any, train: bool = True) -> list[dict]:
        """Token ids (with the tokenizer's special tokens) cut at ``cfg.max_length``, one feature per text."""
        return encode_texts(examples, tokenizer, self.cfg.max_length, ("text",))

    def check_tokens(self, splits: dict[str, list[dict]], tokenizer: Callable[[], Any]) -> None:
        """Drop, in place and with one warning, the texts of fewer than two tokens (they predict none)."""
        loaded, dropped = tokenizer(), []
        for split, examples in splits.items():
            kept = [example for example, feature in zip(examples, self.encode(examples, loaded))
                    if len(feature["input_ids"]) >= 2]
            if not kept:
                raise DataError(f"lm: no text of the {split} split ({self.source_of(split)}) predicts a token: each of "
                                f"its {len(examples)} texts is shorter than two tokens within data.max_length="
                                f"{self.cfg.max_length} (a text predicts its tokens after the first); give texts of "
                                "two tokens or more")
            if len(kept) < len(examples):
                dropped.append(f"{len(examples) - len(kept)} of {len(examples)} of the {split} split "
                               f"({self.source_of(split)})")
            examples[:] = kept
        if dropped:
            warnings.warn(f"lm: dropped the texts shorter than two tokens within data.max_length={self.cfg.max_length}"
                          f", which predict none: {'; '.join(dropped)}", stacklevel=2)

    def postprocess(self, examples: Sequence[dict], features: Sequence[dict], outputs: Any) -> tuple[list, list]:
        """``outputs`` (n, 2) of per-text NLL sums and predicted-token counts -> (NLL sums, token counts)."""
        scored = np.asarray(outputs, dtype=np.float64)
        if scored.shape != (len(examples), 2):
            raise ValueError(f"lm: outputs of shape {scored.shape}, expected ({len(examples)}, 2): NLL sum and tokens")
        return scored[:, 0].tolist(), [int(count) for count in scored[:, 1]]
