"""Readers of the benchmarks' file layouts (TSV, parquet, JSON lines, PTB, fastText, SQuAD JSON, also ``.gz``).

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "dev.tsv"
>>> _ = path.write_text("sentence\\tlabel\\nso good \\t1\\n")
>>> [(place.split(", ")[1], row) for place, row in read_tsv(path, required=("sentence", "label"))]
[('line 2', {'sentence': 'so good ', 'label': '1'})]
"""

from __future__ import annotations

import gzip
import json
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from ..errors import DataError
from ..storage.reading import reading

logger = logging.getLogger(__name__)

Located = tuple[str, dict]  # a record and where it came from: ("data/dev.tsv, line 7", {...})


def where(path: Path | str, line: int, unit: str = "line") -> str:
    """How records are located in messages: ``"a/dev.tsv, line 3"``."""
    return f"{path}, {unit} {line}"


def file_suffix(path: Path | str) -> str:
    """The suffix that says a file's format, under a ``.gz``: ``'.jsonl'`` for ``dev.jsonl.gz``."""
    return Path(Path(path).name.removesuffix(".gz")).suffix


def open_text(path: Path | str) -> IO[str]:
    """Open a UTF-8 text file (a byte-order mark is dropped; lines end only at ``\\n``), through gzip for ``.gz``."""
    path = Path(path)
    with reading(path, "data file"):
        if not path.is_file():
            raise DataError(f"data file not found: {path}")
        return (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8-sig", newline="\n")


def numbered_lines(path: Path | str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its ``\\n`` / ``\\r\\n``) for every non-blank line of a text file."""
    try:
        with open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    yield number, line.rstrip("\n").removesuffix("\r")
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as error:
        raise DataError(f"{path}: cannot be read as UTF-8 text: {error}") from error


def read_tsv(path: Path | str, required: Sequence[str], headerless_columns: Sequence[str] | None = None,
             skip_malformed: bool = False) -> Iterator[Located]:
    """Rows of a tab-separated file as dicts, under its header or else ``headerless_columns``."""
    columns: list[str] | None = None
    for number, line in numbered_lines(path):
        fields = line.split("\t")
        if columns is None:
            if all(name in fields for name in required):
                columns = fields
                continue
            if headerless_columns is None:
                raise DataError(f"{where(path, number)}: expected a header naming the columns {', '.join(required)}; "
                                f"found {fields[:12]}")
            columns = list(headerless_columns)
        if len(fields) != len(columns):
            problem = f"{where(path, number)}: expected {len(columns)} tab-separated fields, found {len(fields)}"
            if not skip_malformed:
                raise DataError(problem)
            logger.warning("skipping malformed row: %s", problem)
            continue
        yield where(path, number), dict(zip(columns, fields))


def read_jsonl(path: Path | str) -> Iterator[Located]:
    """One JSON object per line (blank lines ignored)."""
    for number, line in numbered_lines(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{where(path, number)}: invalid JSON: {error}") from error
        if not isinstance(record, dict):
            raise DataError(f"{where(path, number)}: expected a JSON object, found {type(record).__name__}")
        yield where(path, number), record


def read_parquet(path: Path | str) -> Iterator[Located]:
    """Rows of a parquet file (e.g. a Hugging Face dataset shard) as dicts, numbered from 1."""
    import pyarrow
    import pyarrow.parquet

    path = Path(path)
    open_text(path).close()  # a file that cannot be opened is refused as such, not as malformed parquet
    try:
        source = pyarrow.BufferReader(gzip.decompress(path.read_bytes())) if path.suffix == ".gz" else path
        table = pyarrow.parquet.read_table(source)
    except (pyarrow.ArrowException, OSError, EOFError) as error:
        raise DataError(f"{path}: cannot be read as parquet: {error}") from error
    for number, row in enumerate(table.to_pylist(), start=1):
        yield where(path, number, unit="row"), row


_TREE_LEAF = re.compile(r"\(\d+ ([^()]+)\)")
_TREE_ROOT = re.compile(r"\((\d+) ")
_BACKSLASH_ESCAPE = re.compile(r"\\(.)")
_PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}


def tree_sentence(tree: str) -> tuple[str, str] | None:
    """(sentence, root label) of one labelled PTB tree, escapes undone as pytreebank does; None if it is none."""
    root = _TREE_ROOT.match(tree)
    leaves = _TREE_LEAF.findall(tree)
    if root is None or not leaves or tree.count("(") != tree.count(")"):
        return None
    sentence = " ".join(leaves)
    for token, bracket in _PTB_ESCAPES.items():
        sentence = sentence.replace(token, bracket)
    return _BACKSLASH_ESCAPE.sub(r"\1", sentence), root.group(1)


_FASTTEXT_LINE = re.compile(r"__label__(\S+)\s+(.*)")


def read_sentiment_lines(path: Path | str) -> Iterator[Located]:
    """``{"text", "label"}`` records of an SST file, all PTB trees or all fastText lines (``__label__1`` read as 0)."""
    file_format = None
    for number, line in numbered_lines(path):
        line_format = "ptb" if line.startswith("(") else "fasttext" if line.startswith("__label__") else None
        if line_format is None or (file_format is not None and line_format != file_format):
            expected = file_format or "a PTB tree '(label ...)' or a fastText line '__label__N<TAB>text'"
            raise DataError(f"{where(path, number)}: expected {expected}; found {line[:60]!r}")
        file_format = line_format
        fasttext = _FASTTEXT_LINE.fullmatch(line)
        parsed = tree_sentence(line) if line_format == "ptb" else fasttext and fasttext.group(2, 1)
        if parsed is None:
            raise DataError(f"{where(path, number)}: malformed {line_format} line: {line[:60]!r}")
        text, label = parsed
        if line_format == "fasttext" and label.isdigit():
            label = int(label) - 1
        yield where(path, number), {"text": text, "label": label}


SQUAD_LAYOUT = "the SQuAD layout data/paragraphs/qas"
JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
              bool: "a boolean", type(None): "null"}


def read_squad_json(path: Path | str) -> Iterator[Located]:
    """Questions of a SQuAD v1.1 JSON file as ``{"id", "question", "context", "answers": {"text", "answer_start"}}``;
    a file that is not JSON, not in the SQuAD layout or of another SQuAD version is refused naming the place."""
    with open_text(path) as handle:
        try:
            with reading(path, "data file"):
                document = json.load(handle)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: invalid SQuAD JSON: {error}") from error
        except EOFError as error:  # a truncated .gz
            raise DataError(f"cannot read data file {path}: {error}") from error
    version = document.get("version") if isinstance(document, dict) else None
    if version is not None and str(version).removeprefix("v").split(".")[0] != "1":
        raise DataError(f"{path}: SQuAD version {version}; the squad task reads SQuAD v1.1 files (every question "
                        "answered; v2.0 adds unanswerable ones)")
    for a, article in enumerate(_squad_field(path, document, "data", "", list)):
        for p, paragraph in enumerate(_squad_field(path, article, "paragraphs", f"data[{a}]", list)):
            place = f"data[{a}].paragraphs[{p}]"
            context = _squad_field(path, paragraph, "context", place)
            for q, question in enumerate(_squad_field(path, paragraph, "qas", place, list)):
                item = f"{place}.qas[{q}]"
                qid, text = (_squad_field(path, question, key, item) for key in ("id", "question"))
                answers = [(_squad_field(path, answer, "text", f"{item}.answers[{n}]"),
                            _squad_field(path, answer, "answer_start", f"{item}.answers[{n}]"))
                           for n, answer in enumerate(_squad_field(path, question, "answers", item, list))]
                spans = {"text": [t for t, _ in answers], "answer_start": [start for _, start in answers]}
                yield f"{path}, question {qid}", {"id": qid, "question": text, "context": context, "answers": spans}


def _squad_field(path: Path | str, record: object, key: str, place: str, kind: type = object):
    """``record[key]``, refused in one line unless ``record`` is a JSON object holding ``key`` as a ``kind``."""
    if not isinstance(record, dict):
        raise DataError(f"{path}: not in {SQUAD_LAYOUT}: {place or 'the document'} is "
                        f"{JSON_TYPES.get(type(record))}, not an object")
    if key not in record:
        raise DataError(f"{path}: not in {SQUAD_LAYOUT}: {place or 'the document'} has no {key!r}")
    if not isinstance(record[key], kind):
        raise DataError(f"{path}: not in {SQUAD_LAYOUT}: {f'{place}.{key}' if place else key} is "
                        f"{JSON_TYPES.get(type(record[key]))}, not {JSON_TYPES[kind]}")
    return record[key]
