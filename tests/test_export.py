"""A finished run leaves model/ in Hugging Face format (and no checkpoints); istar-export writes any checkpoint."""
import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

from istar_plugin.cli.export import main as export_main
from istar_plugin.config import compose
from istar_plugin.errors import RunDirError
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments


def run_config(tiny_bert, shared_data, output_dir, *extra):
    return compose(tiny_run_arguments(tiny_bert, shared_data, "optim.grad_accum=1", "optim.epochs=1", "optim.lr=1e-3",
                                      f"output_dir={output_dir}", "tensorboard=false", *extra))


def logits(directory, sentences=("a gripping, beautiful film", "dull and far too long")):
    model = AutoModelForSequenceClassification.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    with torch.no_grad():
        return model(**tokenizer(list(sentences), padding=True, return_tensors="pt")).logits


def test_finished_run_leaves_a_loadable_model_and_no_checkpoints(tiny_bert, shared_data, tmp_path):
    run = tmp_path / "run"
    results = Trainer(run_config(tiny_bert, shared_data, run)).fit()
    assert results["step"] == 4
    assert list((run / "checkpoints").glob("*.pt")) == []  # keep_checkpoints default: none once finished
    model = AutoModelForSequenceClassification.from_pretrained(run / "model")
    assert model.config.id2label == {0: "negative", 1: "positive"}
    assert model.config.label2id == {"negative": 0, "positive": 1}
    classify = pipeline("text-classification", model=str(run / "model"), device="cpu")
    predictions = classify(["a gripping, beautiful film", "dull and far too long"])
    assert {p["label"] for p in predictions} <= {"negative", "positive"} and all(
        0.5 <= p["score"] <= 1 for p in predictions)
    # the exported weights are the trained ones: the run's own evaluation is reproduced from model/
    trainer = Trainer(run_config(tiny_bert, shared_data, tmp_path / "other"))
    trainer.model.model = model.to(trainer.device)
    assert trainer.evaluate()["accuracy"] == results["accuracy"]


def test_rerunning_a_finished_run_returns_its_results_without_training(tiny_bert, shared_data, tmp_path):
    run = tmp_path / "run"
    first = Trainer(run_config(tiny_bert, shared_data, run, "max_steps=3")).fit()
    lines = (run / "metrics.jsonl").read_text()
    again = Trainer(run_config(tiny_bert, shared_data, run, "max_steps=3")).fit()
    assert again == json.loads(json.dumps(first)) and (run / "metrics.jsonl").read_text() == lines
    with pytest.raises(RunDirError, match="finished at step 3 .* cannot continue to step 4"):
        Trainer(run_config(tiny_bert, shared_data, run)).fit()
    with pytest.raises(RunDirError, match="changed: optim.lr"):
        Trainer(run_config(tiny_bert, shared_data, run, "max_steps=3", "optim.lr=0.1")).fit()
    with pytest.raises(RunDirError, match="finished run .* resume=false"):
        Trainer(run_config(tiny_bert, shared_data, run, "max_steps=3", "resume=false")).fit()


def test_istar_export_writes_any_kept_checkpoint(tiny_bert, shared_data, tmp_path, capsys):
    run = tmp_path / "run"
    Trainer(run_config(tiny_bert, shared_data, run, "keep_checkpoints=3", "save_every=1")).fit()
    assert sorted(p.name for p in (run / "checkpoints").glob("*.pt")) == [f"step_0000000{s}.pt" for s in (2, 3, 4)]
    assert export_main([str(run), "--out", str(tmp_path / "latest")]) == 0
    assert torch.equal(logits(tmp_path / "latest"), logits(run / "model"))
    assert export_main([str(run), "--step", "2"]) == 0
    assert "model_step_2" in capsys.readouterr().out
    assert not torch.equal(logits(run / "model_step_2"), logits(run / "model"))
    assert AutoModelForSequenceClassification.from_pretrained(run / "model_step_2").config.id2label[1] == "positive"
    assert export_main([str(run), "--step", "1"]) == 2
    assert "no checkpoint of step 1; steps: 2, 3, 4" in capsys.readouterr().err
    assert export_main([str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err.strip() == f"istar-export: error: {tmp_path / 'absent'}: not a directory"
