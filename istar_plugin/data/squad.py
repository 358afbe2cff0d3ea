"""SQuAD v1.1 features: windows from a fast tokenizer, answers as token spans, logits decoded back to answer text."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError

ENCODING_KEYS = ("input_ids", "token_type_ids", "attention_mask")

Offsets = Sequence[tuple[int, int] | None]  # per token: its (start, end) characters in the context, or None


def check_window_settings(max_length: int, doc_stride: int) -> None:
    """Raise ValueError unless ``doc_stride`` is below ``max_length``."""
    if doc_stride >= max_length:
        raise ValueError(f"data.doc_stride={doc_stride} must be below data.max_length={max_length} minus the "
                         "question's and the special tokens: each window holds the question, then more than "
                         f"doc_stride context tokens; e.g. data.doc_stride={max_length // 3} (a third, as 128 of 384)")


def check_question_room(questions: Sequence[tuple[str, str]], tokenizer: Any, max_length: int, doc_stride: int) -> None:
    """Refuse settings whose windows leave no more than ``doc_stride`` tokens beside a (where, text) question."""
    if not questions:
        return
    lengths = [len(ids) for ids in tokenizer([question.lstrip() for _, question in questions],
                                              add_special_tokens=False)["input_ids"]]
    longest = max(range(len(questions)), key=lengths.__getitem__)
    taken = lengths[longest] + tokenizer.num_special_tokens_to_add(pair=True)
    room, where, needed = max_length - taken, questions[longest][0], taken + doc_stride + 1
    if room < 1:
        raise ConfigError(f"data.max_length={max_length} leaves no room for the context beside the longest question: "
                          f"{taken} tokens with the special tokens ({where}); set data.max_length to at least {needed} "
                          f"(the question and more than data.doc_stride={doc_stride} context tokens)")
    if room <= doc_stride:
        raise ConfigError(f"data.doc_stride={doc_stride} must be below the {room} context tokens "
                          f"data.max_length={max_length} leaves beside the longest question ({taken} tokens with the "
                          f"special tokens; {where}); set data.doc_stride to at most {room - 1} or data.max_length "
                          f"to at least {needed}")


def answer_token_span(context_offsets: Offsets, start_char: int, end_char: int) -> tuple[int, int] | None:
    """(first, last) token covering characters [start_char, end_char) of the context; None if the window cuts it."""
    context_tokens = [i for i, offset in enumerate(context_offsets) if offset is not None]
    first, last = context_tokens[0], context_tokens[-1]
    if context_offsets[first][0] > start_char or context_offsets[last][1] < end_char:
        return None
    start = first
    while context_offsets[start][1] <= start_char:
        start += 1
    end = last
    while context_offsets[end][0] >= end_char:
        end -= 1
    return start, end


def features(examples: Sequence[dict], tokenizer: Any, max_length: int, doc_stride: int, train: bool) -> list[dict]:
    """One feature per window: with ``train`` the first answer's token span (CLS if cut), else id and offsets."""
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(f"SQuAD features need a fast tokenizer (offset mapping); got {type(tokenizer).__name__}")
    check_window_settings(max_length, doc_stride)
    encoded = tokenizer([example["question"].lstrip() for example in examples],
                        [example["context"] for example in examples], truncation="only_second", max_length=max_length,
                        stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True)
    prepared = []
    for index, example_index in enumerate(encoded["overflow_to_sample_mapping"]):
        feature = {key: encoded[key][index] for key in ENCODING_KEYS if key in encoded}
        offsets = [tuple(offset) if sequence == 1 else None
                   for offset, sequence in zip(encoded["offset_mapping"][index], encoded.sequence_ids(index))]
        example = examples[example_index]
        if train:
            start_char = example["answers"]["answer_start"][0]
            span = answer_token_span(offsets, start_char, start_char + len(example["answers"]["text"][0]))
            if span is None:
                cls_index = feature["input_ids"].index(tokenizer.cls_token_id)
                span = (cls_index, cls_index)
            feature["start_positions"], feature["end_positions"] = span
        else:
            feature["example_id"], feature["offset_mapping"] = example["id"], offsets
        prepared.append(feature)
    return prepared


def decode_answers(examples: Sequence[dict], features: Sequence[dict], start_logits: Sequence[Sequence[float]],
                   end_logits: Sequence[Sequence[float]], n_best: int = 20,
                   max_answer_length: int = 30) -> list[str]:
    """The best answer text of each example over its windows (start + end logit of a valid span; ``""`` if none)."""
    if not len(start_logits) == len(end_logits) == len(features):
        raise ValueError(f"got {len(start_logits)} start and {len(end_logits)} end logit rows for {len(features)} "
                         "features")
    windows = defaultdict(list)
    for index, feature in enumerate(features):
        windows[feature["example_id"]].append(index)
    answers = []
    for example in examples:
        best_score, best_text = -np.inf, ""
        for index in windows[example["id"]]:
            offsets = features[index]["offset_mapping"]
            starts, ends = (_row(logits[index], len(offsets), index) for logits in (start_logits, end_logits))
            score, span = _best_span(offsets, starts, ends, n_best, max_answer_length)
            if span is not None and score > best_score:
                best_score, best_text = score, example["context"][offsets[span[0]][0] : offsets[span[1]][1]]
        answers.append(best_text)
    return answers


def _best_span(offsets: Offsets, starts: np.ndarray, ends: np.ndarray, n_best: int,
               max_answer_length: int) -> tuple[float, tuple[int, int] | None]:
    """(score, (start, end)) of the best valid span among the top ``n_best`` starts and ends of one window."""
    top_starts = np.argsort(-starts, kind="stable")[:n_best]
    top_ends = np.argsort(-ends, kind="stable")[:n_best]
    in_context = np.array([offset is not None for offset in offsets])
    span_tokens = top_ends[None, :] - top_starts[:, None] + 1
    valid = (in_context[top_starts][:, None] & in_context[top_ends][None, :]
             & (span_tokens >= 1) & (span_tokens <= max_answer_length))
    if not valid.any():
        return -np.inf, None
    scores = np.where(valid, starts[top_starts][:, None] + ends[top_ends][None, :], -np.inf)
    i, j = np.unravel_index(np.argmax(scores), scores.shape)
    return float(scores[i, j]), (int(top_starts[i]), int(top_ends[j]))


def _row(logits: Sequence[float], length: int, index: int) -> np.ndarray:
    row = np.asarray(logits, dtype=np.float64).reshape(-1)
    if row.size < length:
        raise ValueError(f"feature {index} has {length} tokens but only {row.size} logits")
    return row[:length]
