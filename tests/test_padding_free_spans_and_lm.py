"""Padding-free extractive QA and language modelling (model.padding_free): on the same batch of unequal lengths,
padded and padding-free give the same span or LM logits at the real positions, task loss, every layer's hidden
states at the real positions and every parameter's gradient (the tolerance of tests/test_padding_free.py, which says
why); a feature's QA loss reads its own positions only; the next-token targets never cross a sequence boundary of
the packed row; a short run of each kind with model.padding_free=true ends with the padded run's metrics.
"""
from types import SimpleNamespace

import pytest
import torch

from istar_plugin.config import compose
from istar_plugin.criterions import task_loss
from istar_plugin.models.encoder import HFEncoder, ModelConfig
from istar_plugin.runtime.batching import collate
from istar_plugin.training.trainer import Trainer

import test_padding_free
from helpers import tiny_run_arguments
from test_language_modeling import lm_config
from test_padding_free import ATOL, FAMILIES, RTOL, assert_same_clouds_and_gradients
from test_trainer import squad_article_split

tiny_models, sentences = test_padding_free.tiny_models, test_padding_free.sentences  # its fixtures, shared


def qa_features(model, texts):
    """Question/context pairs of SST-2 sentences (each sentence asks about the next), an answer span inside each."""
    encoded = model.tokenizer(texts[:-1], texts[1:], truncation=True, max_length=40)
    features = [{key: encoded[key][row] for key in encoded} for row in range(len(texts) - 1)]
    for feature in features:
        length = len(feature["input_ids"])
        feature["start_positions"], feature["end_positions"] = length // 3, length // 2
    return features


def lm_features(model, texts):
    """One feature per sentence, as the language-modelling task encodes it."""
    encoded = model.tokenizer(texts, truncation=True, max_length=40)
    return [{key: encoded[key][row] for key in encoded} for row in range(len(texts))]


FEATURES = {"extractive_qa": qa_features, "language_modeling": lm_features}


def padded_and_packed(name_or_path, kind, texts, **model_options):
    """The same batch through the same model padded and padding-free, in eval mode (no dropout), its task loss
    backpropagated: {padding_free: (model, output, loss, batch)}."""
    runs, state = {}, None
    for padding_free in (False, True):
        torch.manual_seed(0)
        model = HFEncoder(ModelConfig(name_or_path=str(name_or_path), padding_free=padding_free, **model_options),
                          kind).eval()
        if state is None:
            state = model.state_dict()
        model.load_state_dict(state)
        batch = collate(FEATURES[kind](model, texts), model.tokenizer.pad_token_id, torch.device("cpu"))
        output = model(batch)
        loss = task_loss(kind, output, batch)
        loss.backward()
        runs[padding_free] = (model, output, loss, batch)
    return runs


def at_real_positions(logits, batch):
    """A padded batch's (batch, length, ...) outputs at its real tokens, in order: (tokens, ...)."""
    return logits.reshape(-1, *logits.shape[2:]).index_select(0, batch["token_positions"])


def assert_the_same(runs):
    (padded, padded_out, padded_loss, batch), (packed, packed_out, packed_loss, _) = runs[False], runs[True]
    assert packed.padding_free and not padded.padding_free
    mask = batch["attention_mask"].bool()
    real = int(mask.sum())
    assert len(set(mask.sum(dim=1).tolist())) > 1  # unequal lengths: padding the packed pass never computes
    assert packed_out.attention_mask is None and packed_out.hidden_states[1].shape == (real, packed.hidden_size)
    if packed.kind == "extractive_qa":
        for name in ("start_logits", "end_logits"):
            padded_logits, packed_logits = getattr(padded_out, name), getattr(packed_out, name)
            assert packed_logits.shape == padded_logits.shape == mask.shape
            torch.testing.assert_close(packed_logits[mask], padded_logits[mask], atol=ATOL, rtol=RTOL)
            lowest = torch.finfo(padded_logits.dtype).min  # no answer in the padding, padded or padding-free
            assert (padded_logits[~mask] == lowest).all() and (packed_logits[~mask] == lowest).all()
    else:
        assert packed_out.logits.shape == (real, padded_out.logits.shape[-1])
        torch.testing.assert_close(packed_out.logits, at_real_positions(padded_out.logits, batch), atol=ATOL,
                                   rtol=RTOL)
    torch.testing.assert_close(packed_loss, padded_loss, atol=ATOL, rtol=RTOL)
    assert_same_clouds_and_gradients(padded, padded_out, packed, packed_out)


@pytest.mark.parametrize("family", FAMILIES.split(", "))
def test_extractive_qa_computes_the_same_padded_and_padding_free(family, tiny_models, sentences):
    options = {} if family == "llama" else {"dropout": 0.0}  # the Llama config has no dropout to set
    assert_the_same(padded_and_packed(tiny_models[family], "extractive_qa", sentences[0], **options))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_language_modelling_computes_the_same_padded_and_padding_free(family, tiny_models, sentences):
    options = {} if family == "llama" else {"dropout": 0.0}
    assert_the_same(padded_and_packed(tiny_models[family], "language_modeling", sentences[0], **options))


def test_extractive_qa_with_lora_reads_the_segments_padded_and_padding_free(tiny_models, sentences):
    """peft's QA wrapper drops token_type_ids: the padded forward calls the model itself, so both read them."""
    runs = padded_and_packed(tiny_models["bert"], "extractive_qa", sentences[0], dropout=0.0,
                             lora={"r": 4, "dropout": 0.0})
    assert_the_same(runs)
    model, output, _, batch = runs[False]
    with torch.no_grad():  # the segments matter: the same batch read as one segment gives other logits
        one_segment = model({**batch, "token_type_ids": torch.zeros_like(batch["token_type_ids"])})
    assert not torch.allclose(one_segment.start_logits, output.start_logits)


def test_language_modelling_with_lora_computes_the_same_padded_and_padding_free(tiny_models, sentences):
    runs = padded_and_packed(tiny_models["llama"], "language_modeling", sentences[0], lora={"r": 4, "dropout": 0.0})
    assert_the_same(runs)
    assert any("lora_A" in name and parameter.grad is not None for name, parameter in runs[True][0].named_parameters())


def test_next_token_targets_crossing_a_sequence_boundary_would_be_seen(tiny_models, sentences, monkeypatch):
    """The comparison can fail: with every packed token taken as one sequence's, each sequence's last token would
    predict the next sequence's first."""
    from istar_plugin.models import packing

    monkeypatch.setattr(packing.Packing, "rows", property(lambda self: torch.zeros_like(self.positions)))
    # the loss, or a parameter's gradient (its message is the parameter's name), whichever differs first
    with pytest.raises(AssertionError, match=r"are not close|\.(weight|bias)$"):
        assert_the_same(padded_and_packed(tiny_models["gpt2"], "language_modeling", sentences[0], dropout=0.0))


def test_a_features_qa_loss_reads_its_own_positions_whatever_its_batchmates_lengths(tiny_bert, sentences):
    model = HFEncoder(ModelConfig(name_or_path=str(tiny_bert), dropout=0.0), "extractive_qa").eval()
    features = qa_features(model, sentences[0])
    shortest = min(features, key=lambda feature: len(feature["input_ids"]))
    with torch.no_grad():
        alone = collate([shortest], model.tokenizer.pad_token_id, torch.device("cpu"))
        among = collate([shortest, *features], model.tokenizer.pad_token_id, torch.device("cpu"))
        assert among["input_ids"].shape[1] > alone["input_ids"].shape[1]
        loss_alone = task_loss("extractive_qa", model(alone), alone)
        output = model(among)
        first = SimpleNamespace(start_logits=output.start_logits[:1], end_logits=output.end_logits[:1])
        loss_among = task_loss("extractive_qa", first, {key: among[key][:1] for key in among})
    torch.testing.assert_close(loss_among, loss_alone, atol=ATOL, rtol=RTOL)


def fit(cfg, padding_free: str) -> dict:
    """A run's results, once its model was seen to compute padding-free or padded as asked."""
    trainer = Trainer(cfg)
    assert trainer.model.padding_free is (padding_free == "true")
    return trainer.fit()


def test_a_padding_free_squad_run_ends_with_the_padded_runs_metrics(tiny_bert, shared_data, tmp_path):
    paths = squad_article_split(shared_data, tmp_path)

    def run(padding_free):
        return fit(compose(tiny_run_arguments(
            tiny_bert, shared_data, "recipe=squad", "criterion=istar", "data.dir=", f"data.train_file={paths['train']}",
            f"data.eval_file={paths['eval']}", "data.max_train_samples=16", "data.max_length=128",
            "data.doc_stride=64", "max_steps=2", "criterion.shrinkage_points=500", "model.dropout=0",
            f"model.padding_free={padding_free}", f"output_dir={tmp_path / padding_free}")), padding_free)

    padded, packed = run("false"), run("true")
    assert packed["step"] == padded["step"] == 2 and packed["main_metric"] == "f1"
    assert (packed["metrics"]["exact_match"], packed["metrics"]["f1"]) == (padded["metrics"]["exact_match"],
                                                                           padded["metrics"]["f1"])
    assert packed["metrics"]["eval_isoscore_star"] == pytest.approx(padded["metrics"]["eval_isoscore_star"],
                                                                    rel=RTOL, abs=ATOL)


def test_a_padding_free_lora_language_modelling_run_ends_with_the_padded_runs_perplexity(tiny_llama, shared_data,
                                                                                         tmp_path):
    def run(padding_free):
        return fit(lm_config(tiny_llama, shared_data, tmp_path / padding_free, "model.lora.r=4", "model.lora.dropout=0",
                             "max_steps=3", f"model.padding_free={padding_free}"), padding_free)

    padded, packed = run("false"), run("true")
    assert packed["step"] == padded["step"] == 3 and packed["main_metric"] == "perplexity"
    for name in ("perplexity", "nll_per_token", "eval_isoscore_star"):
        assert packed["metrics"][name] == pytest.approx(padded["metrics"][name], rel=RTOL, abs=ATOL), name


@pytest.mark.parametrize("family, kind", [("bert", "extractive_qa"), ("gpt2", "language_modeling")])
def test_attention_leaking_across_the_packed_sequences_would_be_seen(family, kind, tiny_models, sentences,
                                                                     monkeypatch):
    """The comparison can fail: with the cumulative lengths dropped, every token attends to the whole packed row."""
    from istar_plugin.models import packing

    monkeypatch.setattr(packing.Packing, "attention_kwargs", lambda self: {})
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        assert_the_same(padded_and_packed(tiny_models[family], kind, sentences[0], dropout=0.0))
