"""IStarTrainer: I-STAR inside a real transformers.Trainer run (a tiny BERT, SST-2) and under torchrun (2 gloo
ranks)."""
import os
import subprocess
import sys

import hf_worker
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, TrainingArguments

from istar_plugin.hf import IStarTrainer, model_kind
from istar_plugin.isotropy import CovarianceAccumulator, isoscore_from_cov
from istar_plugin.models.encoder import token_cloud


@torch.no_grad()
def eval_isoscore(model_dir, sst2_dir):
    """IsoScore* (zeta 0, all layers, padding excluded) of 64 SST-2 dev sentences."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    sentences = [line.split("\t")[0] for line in (sst2_dir / "dev.tsv").read_text().splitlines()[1:65]]
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=64, return_tensors="pt")
    out = model(**batch, output_hidden_states=True)
    union = CovarianceAccumulator(model.config.hidden_size, dtype=torch.float64)
    for layer in token_cloud(out.hidden_states, batch["attention_mask"]):
        union.update(layer)
    return isoscore_from_cov(union.covariance()).item()


def test_isotropy_moves_with_the_sign_of_lambda(tiny_bert, shared_data, tmp_path):
    # measured on tiny_bert: IsoScore* 0.696 before, 0.712 after lambda +5, 0.679 after lambda -5 (MiniLM moves
    # the same way)
    sst2 = shared_data / "sst2"
    before = eval_isoscore(tiny_bert, sst2)
    after = {}
    for lam in (5.0, -5.0):
        out = tmp_path / f"lam{lam}"
        hf_worker.main(tiny_bert, sst2, out, lam, 13)  # 96 sentences / 8 = 12 steps per epoch
        saved = torch.load(out / "rank0.pt", weights_only=False)
        logs = saved["log_history"]
        train = [entry for entry in logs if "loss" in entry]
        assert [entry["step"] for entry in train] == list(range(1, 14))
        for entry in train:  # the Trainer's own log carries the criterion's statistics, penalty = lam (1 - IsoScore*)
            assert entry["penalty"] == pytest.approx(lam * (1 - entry["isoscore_star"]), abs=1e-4)
        sigma = [entry for entry in logs if "sigma_s/points" in entry]
        # at each epoch's start
        assert [(entry["sigma_s/points"], entry["step"]) for entry in sigma] == [(1500, 0), (1500, 12)]
        assert saved["sigma_s"].shape == (32, 32)  # hidden size squared
        after[lam] = eval_isoscore(out / "model", sst2)
    assert after[-5.0] < before < after[5.0], (before, after)


@pytest.mark.slow  # torchrun with two ranks
def test_two_gloo_ranks_share_one_sigma_s(tiny_bert, shared_data, tmp_path):
    # --standalone: torchrun's agent hosts its stores on ports the OS chooses and keeps bound
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               hf_worker.__file__, str(tiny_bert), str(shared_data / "sst2"), str(tmp_path), "-1", "2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert torch.equal(ranks[0]["sigma_s"], ranks[1]["sigma_s"])
    points = [entry["sigma_s/points"] for entry in ranks[0]["log_history"] if "sigma_s/points" in entry]
    assert points == [1500]  # pooled: the two ranks' quotas add up to shrinkage_points
    # the logged statistics are the mean over ranks: identical on both
    logged = [[entry.get("isoscore_star") for entry in rank["log_history"]] for rank in ranks]
    assert logged[0] == logged[1]


def test_model_kind_and_unknown_models(tiny_bert):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=1)
    assert model_kind(model) == "regression"
    with pytest.raises(TypeError, match="supports \\*ForSequenceClassification"):
        model_kind(torch.nn.Linear(2, 2))
    args = TrainingArguments(output_dir=".", use_cpu=True, report_to=[])
    with pytest.raises(KeyError, match="unknown criterion"):
        IStarTrainer(model=model, args=args, criterion="nope")
    with pytest.raises(TypeError, match="criterion 'flow' changes the model"):
        IStarTrainer(model=model, args=args, criterion="flow")


def test_the_model_view_serves_the_padded_cloud_of_padding_include(tiny_bert, tmp_path):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    trainer = IStarTrainer(model=model, args=args, criterion="istar",
                           criterion_args={"lam": -1.0, "padding": "include"})
    batch = AutoTokenizer.from_pretrained(tiny_bert)(["a long sentence of seven words here", "short"], padding=True,
                                                      return_tensors="pt")
    _, output = trainer.view.forward(dict(batch))
    real, = trainer.view.token_cloud(output, [-1])
    padded, = trainer.view.token_cloud(output, [-1], include_padding=True)
    assert real.shape == (int(batch["attention_mask"].sum()), 32)
    assert padded.shape == (batch["input_ids"].numel(), 32) and padded.shape[0] > real.shape[0]
