"""Bad input fails early and says what is wrong and where; the hub source picks the right dataset and columns."""

import gzip
import json

import numpy as np
import pytest

from istar_plugin.data import DataConfig, DataError
from istar_plugin.data.tasks import get_task
from istar_plugin.registry import TASKS

ALL_TASKS = [
    "cola", "mnli", "mnli_mismatched", "movie_snippets", "mrpc", "qnli", "qqp", "rte", "snli", "squad", "sst2",
    "sst5", "stsb", "wnli",
]  # fmt: skip


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def files_task(name, folder, **options):
    return get_task(name, DataConfig(dir=str(folder), **options))


def test_every_task_is_registered_with_consistent_attributes():
    assert sorted(name for name in TASKS.names() if name in ALL_TASKS) == ALL_TASKS
    for name in ALL_TASKS:
        task = get_task(name)
        assert task.name == name and task.main_metric in task.metric_names
        assert task.kind in {"classification", "regression", "extractive_qa"}
        expected_labels = {"classification": len(task.label_names), "regression": 1, "extractive_qa": 0}[task.kind]
        assert task.num_labels == expected_labels and len(task.text_fields) in (1, 2)
    assert get_task("squad").main_metric == "f1" and get_task("mrpc").main_metric == "combined_score"
    assert get_task("cola").main_metric == "matthews_correlation"


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(
        KeyError, match="unknown task 'sst3'; registered tasks: cola, lm, mnli, mnli_mismatched, movie_snippets"
    ):
        get_task("sst3")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"source": "web"}, "data.source 'web' is not supported; choose one of: files, hub, packaged"),
        ({"max_train_samples": 0}, "data.max_train_samples must be a positive integer or None, got 0"),
        ({"max_eval_samples": "5"}, "data.max_eval_samples must be a positive integer or None, got '5'"),
        ({"doc_stride": 0}, "data.doc_stride must be 1 to 16777216 tokens, got 0"),
        ({"max_length": 4}, "data.max_length must be 8 to 16777216 tokens, got 4"),
    ],
)
def test_bad_config_values(options, message):
    with pytest.raises(ValueError, match=message):
        DataConfig(**options)


def test_source_a_task_does_not_have(tmp_path):
    with pytest.raises(
        ValueError, match=r"movie_snippets cannot be read from data.source='files'; its sources: packaged"
    ):
        files_task("movie_snippets", tmp_path).load("train")
    with pytest.raises(ValueError, match="squad cannot be read from data.source='packaged'; its sources: files, hub"):
        get_task("squad", DataConfig(source="packaged")).load("eval")


def test_unknown_split_and_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="sst2: unknown split 'test'; choose one of: train, eval"):
        files_task("sst2", tmp_path).load("test")
    with pytest.raises(ValueError, match="data.source=files needs data.dir"):
        get_task("sst2").load("train")
    with pytest.raises(
        ValueError, match="no default file for split 'validation_matched'; known splits: train, validation"
    ):
        files_task("sst2", tmp_path, eval_split="validation_matched").load("eval")


def test_missing_files_are_named(tmp_path):
    with pytest.raises(DataError, match=r"cola: no train file in .*; tried train.tsv, train.tsv.gz, cola_public/raw/"):
        files_task("cola", tmp_path).load("train")
    with pytest.raises(DataError, match=f"data file not found: {tmp_path / 'nope.tsv'}"):
        files_task("sst2", tmp_path, eval_file="nope.tsv").load("eval")


@pytest.mark.parametrize(
    "task, content, line, problem",
    [
        ("sst2", "sentence\tlabel\ngood\t1\nbad\t0\textra\n", 3, "expected 2 tab-separated fields, found 3"),
        ("sst2", "sentence\tlabel\ngood\t1\nmeh\t2\n", 3,
         r"label '2' is not in the label set of sst2 \(0=negative, 1=positive\)"),
        ("qnli", "question\tsentence\tlabel\nq?\ts.\tmaybe\n", 2, "label 'maybe' is not in the label set of qnli"),
        ("stsb", "sentence1\tsentence2\tscore\na\tb\t7.5\n", 2, r"score '7.5' of stsb must be a number in \[0.0, 5.0"),
        ("stsb", "sentence1\tsentence2\tscore\na\tb\thigh\n", 2, "score 'high' of stsb"),
        ("sst2", "good\t1\n", 1, "expected a header naming the columns sentence, label"),
        ("sst5", "(3 (2 It) (3 works)\n", 1, "malformed ptb line"),
        ("sst5", "(3 (2 It) (3 works))\n__label__2\tbad\n", 2, r"expected ptb; found '__label__2\\tbad'"),
        ("sst5", "__label__9\tfine\n", 1, "label 8 is not in the label set of sst5"),
    ],
)  # fmt: skip
def test_malformed_rows_name_file_and_line(tmp_path, task, content, line, problem):
    write(tmp_path / "dev.tsv", content)
    with pytest.raises(DataError, match=f"{tmp_path / 'dev.tsv'}, line {line}: {problem}"):
        files_task(task, tmp_path, eval_file="dev.tsv").load("eval")


def test_empty_split(tmp_path):
    write(tmp_path / "dev.tsv", "sentence\tlabel\n")
    with pytest.raises(DataError, match=r"sst2: the eval split \(validation, source files\) has no examples"):
        files_task("sst2", tmp_path).load("eval")


def test_unreadable_files(tmp_path):
    (tmp_path / "dev.tsv").write_bytes(b"sentence\tlabel\n\xff\xfe\t1\n")
    with pytest.raises(DataError, match="dev.tsv: cannot be read as UTF-8 text"):
        files_task("sst2", tmp_path).load("eval")
    (tmp_path / "dev.tsv").unlink()
    write(tmp_path / "validation.parquet", "not parquet")
    with pytest.raises(DataError, match="validation.parquet: cannot be read as parquet"):
        files_task("rte", tmp_path).load("eval")
    write(tmp_path / "snli_1.0_test.jsonl", '{"gold_label": "-", "sentence1": "a", "sentence2": "b"}\n{oops\n')
    with pytest.raises(DataError, match="snli_1.0_test.jsonl, line 2: invalid JSON"):
        files_task("snli", tmp_path).load("eval")


def test_snli_files_drop_pairs_without_gold_label(tmp_path):
    rows = [("-", "a", "b"), ("neutral", "c", "d"), ("contradiction", "e", "f")]
    with gzip.open(tmp_path / "snli_1.0_test.jsonl.gz", "wt") as handle:
        for label, first, second in rows:
            handle.write(json.dumps({"gold_label": label, "sentence1": first, "sentence2": second}) + "\n")
    examples = files_task("snli", tmp_path).load("eval")
    assert examples == [{"text": "c", "text_pair": "d", "label": 1}, {"text": "e", "text_pair": "f", "label": 2}]


def squad_json(context, answer, start):
    qa = {"id": "q1", "question": "What?", "answers": [{"text": answer, "answer_start": start}]}
    return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}]})


def test_squad_answers_must_sit_in_their_context(tmp_path):
    write(tmp_path / "dev-v1.1.json", squad_json("Ada wrote it.", "wrote", 4))
    assert files_task("squad", tmp_path).load("eval")[0]["answers"] == {"text": ["wrote"], "answer_start": [4]}
    write(tmp_path / "dev-v1.1.json", squad_json("Ada wrote it.", "wrote", 5))
    with pytest.raises(
        DataError, match=r"dev-v1.1.json, question q1: answer 'wrote' is not in the context at character 5"
    ):
        files_task("squad", tmp_path).load("eval")
    write(tmp_path / "dev-v1.1.json", json.dumps({"data": [{"title": "t"}]}))
    with pytest.raises(DataError, match="not in the SQuAD layout data/paragraphs/qas"):
        files_task("squad", tmp_path).load("eval")


def squad_question(**fields):
    return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Ada wrote it.", "qas": [
        {"id": "q1", "question": "What?", "answers": [{"text": "wrote", "answer_start": 4}], **fields}]}]}]})


@pytest.mark.parametrize("text, problem", [
    ('{"data": [', "invalid SQuAD JSON: Expecting value: line 1 column 11 (char 10)"),
    ("[1, 2]", "not in the SQuAD layout data/paragraphs/qas: the document is an array, not an object"),
    ('{"data": 5}', "not in the SQuAD layout data/paragraphs/qas: data is a number, not an array"),
    ('{"data": ["x"]}', "not in the SQuAD layout data/paragraphs/qas: data[0] is a string, not an object"),
    ('{"data": [{"paragraphs": [{"qas": []}]}]}',
     "not in the SQuAD layout data/paragraphs/qas: data[0].paragraphs[0] has no 'context'"),
    (squad_question(answers={"text": ["wrote"]}),
     "not in the SQuAD layout data/paragraphs/qas: data[0].paragraphs[0].qas[0].answers is an object, not an array"),
    (squad_question(answers=[{"text": "wrote"}]),
     "not in the SQuAD layout data/paragraphs/qas: data[0].paragraphs[0].qas[0].answers[0] has no 'answer_start'"),
    (squad_question(answers=[{"text": "wrote", "answer_start": "x"}]),
     ", question q1: answer 'wrote' has answer_start 'x', not a character index (a whole number from 0)"),
    (squad_question(answers=[{"text": "wrote", "answer_start": None}]),
     ", question q1: answer 'wrote' has answer_start None, not a character index (a whole number from 0)"),
    (squad_question(answers=[{"text": "wrote", "answer_start": 4.7}]),
     ", question q1: answer 'wrote' has answer_start 4.7, not a character index (a whole number from 0)"),
    (squad_question(answers=[{"text": 5, "answer_start": 4}]), ", question q1: answer text 5 is not text"),
    (squad_question(answers=[], is_impossible=True).replace('"1.1"', '"v2.0"'),
     ": SQuAD version v2.0; the squad task reads SQuAD v1.1 files (every question answered; v2.0 adds unanswerable "
     "ones)"),
])  # fmt: skip
def test_every_malformed_squad_file_is_one_data_error_naming_the_file_and_the_defect(tmp_path, text, problem):
    path = write(tmp_path / "dev-v1.1.json", text)
    with pytest.raises(DataError) as refused:
        files_task("squad", tmp_path).load("eval")
    expected = f"{path}{problem}" if problem.startswith((",", ":")) else f"{path}: {problem}"
    assert str(refused.value) == expected


def test_a_squad_file_that_cannot_be_read_is_one_data_error(tmp_path):
    (tmp_path / "dev-v1.1.json.gz").write_bytes(gzip.compress(squad_question().encode())[:30])
    with pytest.raises(DataError, match=r"^cannot read data file .*dev-v1.1.json.gz: Compressed file ended before"):
        files_task("squad", tmp_path, eval_file=str(tmp_path / "dev-v1.1.json.gz")).load("eval")
    (tmp_path / "dev-v1.1.json.gz").unlink()
    (tmp_path / "dev-v1.1.json").write_bytes(b"\xff{}")
    with pytest.raises(DataError, match=r"^cannot read data file .*dev-v1.1.json: not UTF-8 text \(byte 0xff"):
        files_task("squad", tmp_path).load("eval")


def test_whole_number_squad_answer_starts_are_read_as_character_indices(tmp_path):
    for start in (4, 4.0, "4"):
        write(tmp_path / "dev-v1.1.json", squad_question(answers=[{"text": "wrote", "answer_start": start}]))
        assert files_task("squad", tmp_path).load("eval")[0]["answers"] == {"text": ["wrote"], "answer_start": [4]}


def test_postprocess_checks_output_shape(tmp_path):
    write(tmp_path / "dev.tsv", "sentence\tlabel\ngood\t1\nbad\t0\n")
    task = files_task("sst2", tmp_path)
    examples = task.load("eval")
    with pytest.raises(ValueError, match=r"sst2: outputs of shape \(2, 3\), expected \(2, 2\)"):
        task.postprocess(examples, [], np.zeros((2, 3)))


class FakeHub:
    """Stands in for ``datasets.load_dataset``: records each call, returns the given rows."""

    def __init__(self, rows):
        self.rows, self.calls = rows, []

    def __call__(self, dataset_id, config, split):
        self.calls.append((dataset_id, config, split))
        return list(self.rows)


SQUAD_ROW = {
    "id": "x1", "title": "T", "context": "Ada wrote it.", "question": " Who wrote it?",
    "answers": {"text": ["Ada"], "answer_start": [0]},
}  # fmt: skip
GLUE = "nyu-mll/glue"
PAIR, NLI = {"sentence1": "a", "sentence2": "b"}, {"premise": "a", "hypothesis": "b"}
HUB_CASES = [
    ("sst2", (GLUE, "sst2", "validation"), {"sentence": "fine ", "label": 1, "idx": 0}, ("fine", None, 1)),
    ("qnli", (GLUE, "qnli", "validation"), {"question": "a", "sentence": "b", "label": 1}, ("a", "b", 1)),
    ("rte", (GLUE, "rte", "validation"), {**PAIR, "label": 0}, ("a", "b", 0)),
    ("mrpc", (GLUE, "mrpc", "validation"), {**PAIR, "label": 1}, ("a", "b", 1)),
    ("qqp", (GLUE, "qqp", "validation"), {"question1": "a", "question2": "b", "label": 0}, ("a", "b", 0)),
    ("cola", (GLUE, "cola", "validation"), {"sentence": "a", "label": 0}, ("a", None, 0)),
    ("stsb", (GLUE, "stsb", "validation"), {**PAIR, "label": 3.8}, ("a", "b", 3.8)),
    ("wnli", (GLUE, "wnli", "validation"), {**PAIR, "label": 1}, ("a", "b", 1)),
    ("mnli", (GLUE, "mnli", "validation_matched"), {**NLI, "label": 2}, ("a", "b", 2)),
    ("mnli_mismatched", (GLUE, "mnli", "validation_mismatched"), {**NLI, "label": 0}, ("a", "b", 0)),
    (
        "sst5",
        ("SetFit/sst5", None, "validation"),
        {"text": "meh", "label": 2, "label_text": "neutral"},
        ("meh", None, 2),
    ),
    ("snli", ("stanfordnlp/snli", None, "test"), {**NLI, "label": 1}, ("a", "b", 1)),
]


@pytest.mark.parametrize("name, call, row, expected", HUB_CASES)
def test_hub_source_picks_dataset_split_and_columns(name, call, row, expected):
    hub = FakeHub([row])
    task = get_task(name, DataConfig(source="hub"), hub_loader=hub)
    assert task.load("eval") == [dict(zip(("text", "text_pair", "label"), expected))]
    task.load("train")
    assert hub.calls == [call, call[:2] + ("train",)]


def test_hub_squad_and_explicit_eval_split():
    hub = FakeHub([SQUAD_ROW])
    task = get_task("squad", DataConfig(source="hub", eval_split="train"), hub_loader=hub)
    example = task.load("eval")[0]
    assert example == {k: v for k, v in SQUAD_ROW.items() if k != "title"} | {"question": "Who wrote it?"}
    assert hub.calls == [("rajpurkar/squad", None, "train")]


def test_hub_rows_are_checked():
    unlabeled = FakeHub([{"sentence": "a", "label": 0}, {"sentence": "b", "label": -1}])
    with pytest.raises(DataError, match=r"nyu-mll/glue\[cola\] test, row 2: label -1 is not in the label set of cola"):
        get_task("cola", DataConfig(source="hub", eval_split="test"), hub_loader=unlabeled).load("eval")
    wrong_columns = FakeHub([{"text": "a", "label": 0}])
    with pytest.raises(
        DataError, match=r"nyu-mll/glue\[sst2\] train, row 1: missing column\(s\) sentence; found text, label"
    ):
        get_task("sst2", DataConfig(source="hub"), hub_loader=wrong_columns).load("train")
    no_gold = FakeHub(
        [{"premise": "p", "hypothesis": "h", "label": -1}, {"premise": "q", "hypothesis": "i", "label": 0}]
    )
    snli = get_task("snli", DataConfig(source="hub"), hub_loader=no_gold)
    assert snli.load("eval") == [{"text": "q", "text_pair": "i", "label": 0}]
