"""Padding-free wherever a forward runs besides training and evaluation: istar-analyze and istar-embed read a run
trained padding-free padding-free, the Sigma_S pass streams packed batches, the frozen-backbone cache computes a
padding-free model's missing examples on their packed row; each gives the padded numbers (atol 1e-5, rtol 1e-4,
as tests/test_padding_free.py). The sentence-transformers engine: tests/test_st_engine.py.
"""
import contextlib
import json
import shutil
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from istar_plugin.analysis import analyze
from istar_plugin.analysis.loading import load_pretrained, load_run
from istar_plugin.analysis.sts_embeddings import open_encoder
from istar_plugin.cli import embed as embed_cli
from istar_plugin.config import compose
from istar_plugin.criterions.shrinkage import estimate_shrinkage_covariance
from istar_plugin.models.encoder import HFEncoder, ModelConfig
from istar_plugin.models.sentence_encoder import POOLINGS, SentenceEncoder
from istar_plugin.runtime.batching import collate
from istar_plugin.training.trainer import Trainer

import test_padding_free
from helpers import tiny_run_arguments
from test_padding_free import ATOL, RTOL

tiny_models, sentences = test_padding_free.tiny_models, test_padding_free.sentences  # its fixtures, shared

NUMBERS = ("isoscore_star", "isoscore_star_per_layer", "twonn_per_layer", "mean_activation",
           "explained_variance_per_layer", "cls_explained_variance", "average_cosine_per_layer",
           "max_activation_ratio_per_layer")
EXACT = ("examples", "tokens_per_layer", "outlier_dimensions_per_layer", "word_embeddings")


def close(actual, expected, what=""):
    """Equal within the tolerance, number by number through nested lists."""
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), what
        for actual_item, expected_item in zip(actual, expected):
            close(actual_item, expected_item, what)
    else:
        assert actual == pytest.approx(expected, rel=RTOL, abs=ATOL), what


@pytest.fixture(scope="module")
def runs(tiny_bert, shared_data, tmp_path_factory):
    """A tiny run trained padding-free (fp32), and a copy of it whose config.yaml says padded: the same weights."""
    root = tmp_path_factory.mktemp("padding_free_runs")
    cfg = compose(tiny_run_arguments(
        tiny_bert, shared_data, "data.max_eval_samples=40", "eval_batch_size=16", "optim.epochs=1", "optim.lr=1e-3",
        "precision=fp32", "model.dropout=0", "model.padding_free=true", f"output_dir={root / 'packed'}"))
    Trainer(cfg).fit()
    shutil.copytree(root / "packed", root / "padded")
    config = OmegaConf.load(root / "padded" / "config.yaml")
    config.model.padding_free = False
    OmegaConf.save(config, root / "padded" / "config.yaml")
    return {True: root / "packed", False: root / "padded"}


def test_istar_analyze_reads_a_padding_free_run_padding_free_with_the_padded_numbers(runs):
    assert load_run(runs[True]).model.padding_free and not load_run(runs[False]).model.padding_free
    packed, padded = analyze.analyze_run(runs[True]), analyze.analyze_run(runs[False])
    assert packed["results_max_abs_difference"] < 1e-6  # the run evaluated padding-free, as the analysis reads it
    for key in NUMBERS:
        close(packed[key], padded[key], key)
    for key in EXACT:
        assert packed[key] == padded[key], key
    assert packed["examples"] == 40


def test_istar_analyze_reads_a_run_whose_criterion_scores_the_padding_padded(tiny_bert, shared_data):
    """criterion.padding=include with model.padding_free=auto trains padded: the model istar-analyze and istar-export
    build for it (the one builder the trainer uses) computes padded too, with the run's line saying why."""
    loaded = load_pretrained(compose(tiny_run_arguments(
        tiny_bert, shared_data, "criterion=istar", "criterion.padding=include", "model.padding_free=auto")))
    assert not loaded.model.padding_free
    assert loaded.model.padding_free_line == (
        "model.padding_free=auto: padded batches (criterion.padding=include scores the padded positions too)")


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_the_analysis_pass_reads_each_example_s_vector_from_the_packed_row(family, tiny_models, shared_data):
    """An encoder's example vector is its first token, a decoder's its last real one: the same, packed or padded."""
    streamed = {}
    for padding_free in ("true", "false"):
        loaded = load_pretrained(compose(tiny_run_arguments(
            tiny_models[family], shared_data, "data.max_eval_samples=12", "precision=fp32",
            f"model.padding_free={padding_free}")))
        assert loaded.model.padding_free is (padding_free == "true")
        streamed[padding_free] = analyze.stream_split(loaded, "eval", batch_size=6)
    (packed, packed_vectors), (padded, padded_vectors) = streamed["true"], streamed["false"]
    for packed_layer, padded_layer in zip(packed.layers, padded.layers, strict=True):
        assert packed_layer.count == padded_layer.count
        torch.testing.assert_close(packed_layer.covariance(), padded_layer.covariance(), atol=ATOL, rtol=RTOL)
    for packed_layer, padded_layer in zip(packed_vectors, padded_vectors, strict=True):
        torch.testing.assert_close(torch.cat(packed_layer), torch.cat(padded_layer), atol=ATOL, rtol=RTOL)


def test_istar_embed_encodes_a_padding_free_run_padding_free_with_the_padded_vectors(runs, sentences, shared_data,
                                                                                     tmp_path, capsys):
    packed, padded = open_encoder(str(runs[True])), open_encoder(str(runs[False]))
    assert packed.pack is not None and padded.pack is None
    texts, _ = sentences
    for pooling in POOLINGS:
        vectors = packed.encode(texts, pooling, layers=[0, 1, 2], batch_size=5)
        expected = padded.encode(texts, pooling, layers=[0, 1, 2], batch_size=5)
        for layer in (0, 1, 2):
            torch.testing.assert_close(vectors[layer], expected[layer], atol=ATOL, rtol=RTOL, msg=pooling)
    reports = {}
    for padding_free, run in runs.items():
        out = tmp_path / str(padding_free)
        assert embed_cli.main([str(run), "--sts", str(shared_data / "stsb"), "--transforms", "none,center", "--fit",
                               "dev", "--out", str(out)]) == 0
        reports[padding_free] = json.loads((out / "embeddings.json").read_text())["transforms"]
    capsys.readouterr()
    packed_report, padded_report = reports[True], reports[False]
    for name in ("none", "center"):
        for measure in ("spearman", "isoscore", "isoscore_star", "average_cosine", "rankme"):
            close(packed_report[name][measure], padded_report[name][measure], f"{name} {measure}")


def test_a_lora_decoder_s_sentence_vectors_are_the_same_padding_free(tiny_models, sentences):
    texts, _ = sentences
    encoders, state = {}, None
    for padding_free in (False, True):
        torch.manual_seed(0)
        model = HFEncoder(ModelConfig(name_or_path=str(tiny_models["llama"]), padding_free=padding_free,
                                      lora={"r": 4, "dropout": 0.0}), "classification").eval()
        state = model.state_dict() if state is None else state
        model.load_state_dict(state)
        encoders[padding_free] = SentenceEncoder(model.model.base_model, model.tokenizer,
                                                 pack=model.pack if padding_free else None)
    for pooling in ("mean", "last_token"):
        torch.testing.assert_close(encoders[True].encode(texts, pooling, batch_size=8)[2],
                                   encoders[False].encode(texts, pooling, batch_size=8)[2], atol=ATOL, rtol=RTOL)


def same_models(name_or_path, **options):
    """{padding_free: HFEncoder} with the same weights, in eval mode."""
    models, state = {}, None
    for padding_free in (False, True):
        torch.manual_seed(0)
        model = HFEncoder(ModelConfig(name_or_path=str(name_or_path), padding_free=padding_free, dropout=0.0,
                                      **options), "classification").eval()
        state = model.state_dict() if state is None else state
        model.load_state_dict(state)
        models[padding_free] = model
    return models


def features(model, texts):
    encoded = model.tokenizer(texts, truncation=True, max_length=40)
    return [{key: encoded[key][row] for key in encoded} for row in range(len(texts))]


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_the_sigma_s_pass_streams_packed_batches_with_the_padded_statistics(family, tiny_models, sentences):
    texts, _ = sentences
    accumulators = {}
    for padding_free, model in same_models(tiny_models[family]).items():
        seen: list[bool] = []
        model.register_forward_hook(lambda module, args, output, seen=seen: seen.append(output.packing is not None))
        train = features(model, texts)
        run = SimpleNamespace(
            model=model, rank=0, world_size=1, seed=3, train_features=train, eval_batch_size=3, device="cpu",
            stop_requested=False, show_progress=False, autocast=contextlib.nullcontext,
            collate=lambda rows, model=model: collate(rows, model.tokenizer.pad_token_id, torch.device("cpu")))
        real = sum(len(row["input_ids"]) for row in train)
        quota = 2 * real - 7  # two layers' clouds: the quota ends inside the last batch's second layer
        accumulators[padding_free] = estimate_shrinkage_covariance(run, [1, 2], quota, epoch=0)
        assert set(seen) == {padding_free} and accumulators[padding_free].count == quota
    torch.testing.assert_close(accumulators[True].mean, accumulators[False].mean, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(accumulators[True].covariance(), accumulators[False].covariance(), atol=ATOL, rtol=RTOL)


def test_the_frozen_backbone_cache_computes_a_padding_free_model_s_examples_on_their_packed_row(tiny_models,
                                                                                                  sentences):
    texts, _ = sentences
    logits, cached, shapes = {}, {}, {}
    for padding_free, model in same_models(tiny_models["bert"]).items():
        model.requires_grad_(False)
        model.transformer.classifier.requires_grad_(True)
        assert model.cache_frozen_backbone()
        shapes[padding_free] = []
        model.transformer.base_model.register_forward_pre_hook(
            lambda module, args, kwargs, into=shapes[padding_free]: into.append(
                tuple((args[0] if args else kwargs["input_ids"]).shape)), with_kwargs=True)
        batch = collate(features(model, texts), model.tokenizer.pad_token_id, torch.device("cpu"))
        model.train()
        logits[padding_free] = model(batch).logits  # the examples computed once, then read from the cache
        model.eval()
        later = collate(features(model, [text + " indeed" for text in texts[:3]]), model.tokenizer.pad_token_id,
                        torch.device("cpu"))
        assert len(model(later).hidden_states) == 3  # an evaluation pass runs the whole model and fills the cache
        assert len(model.frozen_cache) == len(texts) + 3
        cached[padding_free] = model.frozen_cache.lookup(model.frozen_cache.keys(batch) +
                                                         model.frozen_cache.keys(later))
    real = int(batch["attention_mask"].sum())
    assert shapes[True][0] == (1, real) and shapes[False][0] == tuple(batch["input_ids"].shape)
    torch.testing.assert_close(cached[True], cached[False], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(logits[True], logits[False], atol=ATOL, rtol=RTOL)
