"""The one streaming per-layer statistics pass: LayerStatistics against torch.cov of the concatenated cloud, and its
callers (the sentence-transformers engine's token IsoScore*, Sigma_S's pass, the evaluation pass) against a direct
computation on one batch of the same sentences: the two compute in other batch shapes, so the model's fp32 states
differ by rounding, and both run again with the model in float64 (tests/tolerances.py)."""
import contextlib
from types import SimpleNamespace

import pytest
import torch

from istar_plugin.criterions.shrinkage import estimate_shrinkage_covariance, shrinkage_shard
from istar_plugin.isotropy import isoscore
from istar_plugin.isotropy.streaming import LayerStatistics, stream
from istar_plugin.models.encoder import HFEncoder, ModelConfig
from istar_plugin.models.token_cloud import stream_token_statistics, token_cloud
from istar_plugin.runtime.batching import collate
from tolerances import assert_same_computation

SENTENCES = ["a short one", "a slightly longer sentence than that", "tokens", "two more words here and there",
             "the last of them", "padding makes these rows uneven in length, which the mask must undo"]


def test_per_layer_and_pooled_statistics_are_those_of_the_concatenated_clouds():
    generator = torch.Generator().manual_seed(0)
    batches = [[torch.randn(n, 5, generator=generator, dtype=torch.float64) * torch.arange(1, 6) + layer
                for layer in range(3)] for n in (7, 1, 30)]
    statistics = stream(LayerStatistics(5, num_layers=3), batches, lambda clouds: clouds)
    for layer, accumulator in enumerate(statistics.layers):
        expected = torch.cat([clouds[layer] for clouds in batches])
        assert torch.allclose(accumulator.covariance(), torch.cov(expected.T)) and accumulator.count == 38
    union = torch.cat([cloud for clouds in batches for cloud in clouds])
    assert torch.allclose(statistics.union().covariance(), torch.cov(union.T))
    assert statistics.isoscore_star() == pytest.approx(isoscore(union).item(), abs=1e-12)
    with pytest.raises(ValueError, match="one cloud per layer"):
        statistics.update(batches[0][:2])


def test_a_quota_takes_the_first_points_offered_and_stops_the_batches():
    points = torch.randn(100, 4, dtype=torch.float64)
    made = []

    def batches():
        for start in range(0, 100, 20):
            made.append(start)
            yield points[start : start + 20]

    statistics = stream(LayerStatistics(quota=45), batches(), lambda batch: [batch[:10], batch[10:]])
    assert statistics.count == 45 and made == [0, 20, 40]  # the fourth batch is never made
    assert torch.allclose(statistics.union().covariance(), torch.cov(points[:45].T))
    assert statistics.union() is statistics.layers[0]  # pooled: one accumulator, sized by the first cloud


def test_a_padding_free_batch_needs_no_mask():
    states = [torch.randn(2, 3, 4) for _ in range(3)]
    assert [torch.equal(a, b.reshape(-1, 4)) for a, b in zip(token_cloud(states, None), states[1:])] == [True, True]


@pytest.fixture(scope="module")
def encoder(tiny_bert):
    torch.manual_seed(0)
    return HFEncoder(ModelConfig(name_or_path=str(tiny_bert), local_files_only=True, padding_free=False),
                     "classification", 2).eval()


@pytest.fixture(scope="module")
def features(encoder):
    return [{"input_ids": ids, "attention_mask": [1] * len(ids)}
            for ids in encoder.tokenizer(SENTENCES)["input_ids"]]


def direct_clouds(encoder, features):
    """Every layer's real tokens, from one padded batch of all the features."""
    with torch.no_grad():
        output = encoder(collate(features, encoder.tokenizer.pad_token_id, torch.device("cpu")))
    mask = output.attention_mask.bool()
    return [hidden[mask].double() for hidden in output.hidden_states[1:]]


def in_fp32_and_float64(encoder, compute):
    """``compute()`` with ``encoder`` in float64 and in fp32 (as it is left): {dtype: result}."""
    results = {}
    for dtype in (torch.float64, torch.float32):
        encoder.to(dtype)
        results[dtype] = compute()
    return results


def test_the_model_pass_is_the_direct_per_layer_isoscore(encoder, features):
    pad = encoder.tokenizer.pad_token_id

    def both():
        batches = (collate(features[start : start + 4], pad, torch.device("cpu"))
                   for start in range(0, len(features), 4))
        statistics = stream_token_statistics(encoder, batches, LayerStatistics(32, encoder.num_layers))
        clouds = direct_clouds(encoder, features)
        return (torch.tensor([statistics.isoscore_star(), *statistics.isoscore_star_per_layer()]),
                torch.tensor([isoscore(torch.cat(clouds)).item(), *(isoscore(c).item() for c in clouds)]))

    scores = in_fp32_and_float64(encoder, both)
    assert_same_computation(scores[torch.float32], scores[torch.float64], what="pooled and per-layer IsoScore*")


def test_sigma_s_samples_disjoint_shards_of_the_training_set():
    assert sorted(shrinkage_shard(6, 0, 0, 0, 2) + shrinkage_shard(6, 0, 0, 1, 2)) == [0, 1, 2, 3, 4, 5]


def test_sigma_s_is_the_covariance_of_the_sampled_tokens(encoder, features):
    run = SimpleNamespace(model=encoder, rank=0, world_size=1, seed=0, train_features=features, eval_batch_size=2,
                          collate=lambda batch: collate(batch, encoder.tokenizer.pad_token_id, torch.device("cpu")),
                          autocast=contextlib.nullcontext, device=torch.device("cpu"), show_progress=False,
                          stop_requested=False)
    def both():
        accumulator = estimate_shrinkage_covariance(run, None, 10**6, epoch=0)
        union = torch.cat(direct_clouds(encoder, features))
        assert accumulator.count == union.shape[0]
        return accumulator.covariance(), torch.cov(union.T)

    covariances = in_fp32_and_float64(encoder, both)
    assert_same_computation(covariances[torch.float32], covariances[torch.float64], what="Sigma_S")


def test_the_sentence_transformers_engine_scores_every_layers_real_tokens(tiny_bert):
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    from istar_plugin.integrations.st_engine import token_isoscores

    model = SentenceTransformer(str(tiny_bert), device="cpu")
    per_layer, pooled = token_isoscores(model, SENTENCES, batch_size=4)
    batch = model.tokenize(SENTENCES)
    with torch.no_grad():
        out = model[0].auto_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                  output_hidden_states=True)
    mask = batch["attention_mask"].bool()
    clouds = [state[mask].double() for state in out.hidden_states[1:]]
    assert per_layer == pytest.approx([isoscore(c).item() for c in clouds], abs=1e-6)
    assert pooled == pytest.approx(isoscore(torch.cat(clouds)).item(), abs=1e-6)


def test_the_evaluator_streams_the_direct_per_layer_clouds(encoder, features):
    from istar_plugin.training.evaluation import Evaluator

    evaluator = Evaluator(SimpleNamespace(kind="classification"), encoder, [], features, batch_size=4, rank=0,
                          world_size=1, device=torch.device("cpu"), sort_by_length=True, show_progress=False,
                          collate=lambda batch: collate(batch, encoder.tokenizer.pad_token_id, torch.device("cpu")),
                          autocast=contextlib.nullcontext)
    def both():
        outputs, per_layer = evaluator.predict()
        clouds = direct_clouds(encoder, features)
        assert [a.count for a in per_layer] == [c.shape[0] for c in clouds] and len(outputs["logits"]) == len(features)
        return [(accumulator.covariance(), torch.cov(cloud.T)) for accumulator, cloud in zip(per_layer, clouds)]

    covariances = in_fp32_and_float64(encoder, both)
    for layer, (fp32, fp64) in enumerate(zip(covariances[torch.float32], covariances[torch.float64]), start=1):
        assert_same_computation(fp32, fp64, what=f"layer {layer}")
