"""End-to-end runs of the trainer on a tiny randomly initialised BERT (real tokenizer, real SST-2 files): what a run
writes, how it resumes (onto the data it started on only), and what its criterion does."""
import json
import os

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from istar_plugin.config import compose
from istar_plugin.errors import RunDirError
from istar_plugin.storage.checkpoints import save_verified
from istar_plugin.storage.predictions import read_predictions
from istar_plugin.storage.results import read_results
from istar_plugin.runtime.batching import epoch_order
from istar_plugin.training.trainer import Trainer

from helpers import CrashAt, tiny_run_arguments  # noqa: E402


def tiny_config(tiny_bert, shared_data, output_dir, *extra):
    return compose(tiny_run_arguments(
        tiny_bert, shared_data, "data.max_train_samples=48", "data.max_eval_samples=24", "optim.grad_accum=2",
        "optim.epochs=2", "optim.lr=1e-3", f"output_dir={output_dir}", "log_every=1", *extra,
        *(["criterion.shrinkage_points=300"] if "criterion=istar" in extra else []),
    ))


def test_epoch_order_is_a_seeded_partition():
    shards = [epoch_order(10, 3, 1, rank, 2) for rank in range(2)]
    assert sorted(shards[0] + shards[1]) == list(range(10))
    assert epoch_order(10, 3, 1, 0, 1) == epoch_order(10, 3, 1, 0, 1) != epoch_order(10, 3, 2, 0, 1)


def test_istar_run_writes_results_metrics_tensorboard_and_checkpoints(tiny_bert, shared_data, tmp_path):
    cfg = tiny_config(tiny_bert, shared_data, tmp_path / "run", "criterion=istar", "criterion.lam=-1")
    results = Trainer(cfg).fit()
    assert results["step"] == 6 and results["epoch"] == 2  # 48 examples / 8 = 6 batches = 3 steps per epoch
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["accuracy"] == results["metrics"]["accuracy"] and 0 <= saved["accuracy"] <= 1
    # the run directory's files, as documented (docs/results/run_files.csv): checkpoints go once the run finished
    assert sorted(path.name for path in (tmp_path / "run").iterdir() if path.name != "checkpoints") == [
        ".istar-run", "config.yaml", "metrics.jsonl", "model", "predictions.json", "results.json", "tensorboard"]
    scored = read_predictions(tmp_path / "run")  # per example, in the eval split's order: the accuracy recomputed
    assert scored.step == 6 and len(scored.predictions) == len(scored.references) == 24
    assert sum(p == r for p, r in zip(scored.predictions, scored.references)) / 24 == pytest.approx(saved["accuracy"])
    assert not list((tmp_path / "run" / "checkpoints").glob("step_*")) and saved["schema_version"] == 2
    assert saved["criterion"] == {"name": "istar", "lam": -1.0, "zeta": 0.2, "shrinkage_points": 300, "layers": None,
                                  "shrinkage_mode": "eval", "distributed_cloud": "pooled", "padding": "exclude"}
    assert 0 < saved["eval_isoscore_star"] < 1 and len(saved["eval_isoscore_star_per_layer"]) == 2
    assert [h["step"] for h in saved["history"]] == [0, 3, 6]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "train/loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]
    # the rate each step used: no warm-up (0.06 x 6 steps < 1), linear decay over 6 steps, the last one not 0
    assert [r["train/lr"] for r in train] == pytest.approx([1e-3 * (6 - k) / 6 for k in range(6)])
    for r in train:  # loss = task loss + penalty, penalty = lam * (1 - IsoScore*)
        assert r["train/loss"] == pytest.approx(r["train/task_loss"] + r["train/penalty"], abs=1e-5)
        assert r["train/penalty"] == pytest.approx(-(1 - r["train/isoscore_star"]), abs=1e-5)
    sigma = [r for r in records if "sigma_s/points" in r]
    assert [r["sigma_s/points"] for r in sigma] == [300, 300]  # before training and after epoch 1
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4, 5, 6]
    assert events.Scalars("eval/accuracy")[-1].value == pytest.approx(saved["accuracy"])
    assert events.Scalars("eval/isoscore_star")[-1].value == pytest.approx(saved["eval_isoscore_star"])
    assert not [tag for tag in events.Tags()["scalars"] if "eval_" in tag]  # no doubled prefix
    config_text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "    lam: -1.0" in config_text and "    task: sst2" in config_text
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams import plugin_data_pb2
    events = EventMultiplexer({"run": str(tmp_path / "run" / "tensorboard")}).Reload()
    hparams = events.PluginRunToTagToContent("hparams")
    start = hparams["run"]["_hparams_/session_start_info"]
    session = plugin_data_pb2.HParamsPluginData.FromString(start).session_start_info
    assert session.hparams["criterion.lam"].number_value == -1.0
    assert session.hparams["model.name"].string_value == "minilm"
    assert list((tmp_path / "run" / "checkpoints").glob("step_*.pt")) == []  # finished: model/ replaces them
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()


@pytest.mark.parametrize("padding_free", ["false", "true"])  # padded and padding-free batches
@pytest.mark.parametrize("criterion", ["istar", "cosreg", "flow"])
def test_run_killed_mid_epoch_resumes_to_the_same_result(tiny_bert, shared_data, tmp_path, criterion, padding_free):
    mode = f"model.padding_free={padding_free}"
    straight = Trainer(tiny_config(tiny_bert, shared_data, tmp_path / "straight", f"criterion={criterion}", mode)).fit()
    crashed_cfg = tiny_config(tiny_bert, shared_data, tmp_path / "crashed", f"criterion={criterion}", mode,
                              "save_every=1")
    with pytest.raises(KeyboardInterrupt):
        Trainer(crashed_cfg, hooks=[CrashAt(4)]).fit()  # step 4 is mid-way through epoch 2
    resumed = Trainer(crashed_cfg).fit()
    assert resumed["step"] == straight["step"] == 6
    assert resumed["metrics"] == straight["metrics"]
    assert [h["step"] for h in resumed["history"]] == [0, 3, 6]


def test_a_checkpoint_of_another_world_size_resumes_only_from_an_epoch_boundary(tiny_bert, shared_data, tmp_path):
    cfg = tiny_config(tiny_bert, shared_data, tmp_path / "run", "criterion=cross_entropy", "save_every=1")
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, hooks=[CrashAt(5)]).fit()  # killed before step 5's checkpoint: steps 3 and 4 are kept
    checkpoints = tmp_path / "run" / "checkpoints"
    for path in checkpoints.glob("step_*.pt"):  # as if two ranks had saved them: one RNG state per rank
        state = torch.load(path, weights_only=False)
        save_verified({**state, "rng": state["rng"] * 2}, path)  # with its new checksum
    with pytest.raises(RunDirError, match=r"step 4\) was taken mid-epoch by 2 rank\(s\); resume it on 2, not 1"):
        Trainer(cfg).fit()
    (checkpoints / "step_00000004.pt").unlink()  # step 3 ends epoch 1
    with pytest.warns(UserWarning, match="2-rank checkpoint on 1 rank"):
        results = Trainer(cfg).fit()
    assert results["step"] == 6 and [h["step"] for h in results["history"]] == [0, 3, 6]


def test_a_resume_onto_an_edited_training_file_is_refused_naming_it(tiny_bert, shared_data, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    lines = (shared_data / "sst2" / "train.tsv").read_text().splitlines(keepends=True)[:40]
    (data / "train.tsv").write_text("".join(lines))
    (data / "dev.tsv").write_text((shared_data / "sst2" / "dev.tsv").read_text())
    run = tmp_path / "run"
    cfg = compose(tiny_run_arguments(tiny_bert, shared_data, "data.max_train_samples=16", "optim.grad_accum=1",
                                     "optim.epochs=1", f"output_dir={run}", "tensorboard=false", f"data.dir={data}",
                                     "save_every=1"))
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, hooks=[CrashAt(2)]).fit()  # killed before step 2's checkpoint: step 1's is kept
    os.utime(data / "train.tsv")  # touched, same content: resumable
    lines[3] = lines[3].replace("\t0", "\t1") if "\t0" in lines[3] else lines[3].replace("\t1", "\t0")
    (data / "train.tsv").write_text("".join(lines))  # one label edited in place
    with pytest.raises(RunDirError, match=rf"on other data \(changed: train \({data / 'train.tsv'}: 16 examples then, "
                                          r"16 now, their content differs\)\); resume with the data it started on"):
        Trainer(cfg).fit()
    lines[3] = lines[3].replace("\t1", "\t0") if "\t1" in lines[3] else lines[3].replace("\t0", "\t1")
    (data / "train.tsv").write_text("".join(lines))  # put back: the run resumes and records what it read
    results = Trainer(cfg).fit()
    saved = json.loads((run / "results.json").read_text())
    assert results["step"] == 2 and saved["data"]["train"]["source"] == str(data / "train.tsv")
    assert saved["data"]["train"]["examples"] == 16 and len(saved["data"]["eval"]["sha256"]) == 64


def test_resume_restores_sigma_s_instead_of_recomputing(tiny_bert, shared_data, tmp_path):
    cfg = tiny_config(tiny_bert, shared_data, tmp_path / "run", "criterion=istar", "save_every=1")
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, hooks=[CrashAt(2)]).fit()
    # CrashAt(2) precedes step 2's save
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "step_00000001.pt", weights_only=False)
    saved_cov = checkpoint["hooks"][0]["shrinkage_cov"]
    assert saved_cov.shape == (32, 32) and torch.isfinite(saved_cov).all() and saved_cov.abs().sum() > 0
    first = Trainer(cfg)
    first._restore()
    assert torch.equal(first.criterion.shrinkage_cov, saved_cov)  # the checkpoint's matrix, bit for bit
    records_before = (tmp_path / "run" / "metrics.jsonl").read_text().count("sigma_s/points")
    first.fit()
    records_after = (tmp_path / "run" / "metrics.jsonl").read_text().count("sigma_s/points")
    assert records_after - records_before == 1  # only the epoch-2 recomputation, not a new epoch-1 one


def test_positive_lambda_raises_and_negative_lowers_batch_isotropy(tiny_bert, shared_data, tmp_path):
    scores = {}
    for lam in (-20, 20):
        cfg = tiny_config(tiny_bert, shared_data, tmp_path / f"lam{lam}", "criterion=istar", f"criterion.lam={lam}",
                          "criterion.zeta=0", "optim.epochs=1", "eval_before_training=false")
        scores[lam] = Trainer(cfg).fit()["eval_isoscore_star"]
    assert scores[20] > scores[-20]


def squad_article_split(shared_data, directory, train_articles=slice(0, 1), eval_articles=slice(47, 48)):
    """SQuAD v1.1 dev split by article into train/eval files (../shared/data has no SQuAD train file)."""
    squad = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text())
    paths = {}
    for name, articles in (("train", train_articles), ("eval", eval_articles)):
        paths[name] = directory / f"squad_{name}.json"
        paths[name].write_text(json.dumps({"version": "1.1", "data": squad["data"][articles]}))
    return paths


def test_squad_trains_and_reports_exact_match_and_f1(tiny_bert, shared_data, tmp_path):
    paths = squad_article_split(shared_data, tmp_path)
    cfg = compose(tiny_run_arguments(
        tiny_bert, shared_data, "recipe=squad", "criterion=istar", "data.dir=", f"data.train_file={paths['train']}",
        f"data.eval_file={paths['eval']}", "data.max_train_samples=16", "data.max_length=128", "data.doc_stride=64",
        "max_steps=2", "criterion.shrinkage_points=500", f"output_dir={tmp_path / 'run'}",
    ))
    results = Trainer(cfg).fit()
    assert results["main_metric"] == "f1" and results["step"] == 2
    assert 0 <= results["exact_match"] <= results["f1"] <= 100
    assert 0 < results["eval_isoscore_star"] < 1


def test_a_run_directory_of_another_run_is_refused_not_overwritten(tiny_bert, shared_data, tmp_path):
    kept = "keep_checkpoints=1"  # a finished run keeps its last checkpoint
    Trainer(tiny_config(tiny_bert, shared_data, tmp_path / "run", "criterion=cross_entropy", "max_steps=1", kept)).fit()
    before = (tmp_path / "run" / "results.json").read_text()
    other = tiny_config(tiny_bert, shared_data, tmp_path / "run", "criterion=cross_entropy", "max_steps=1",
                        "optim.lr=0.5", kept)
    config_before = (tmp_path / "run" / "config.yaml").read_text()
    with pytest.raises(RunDirError, match=r"holds a checkpoint of a different run \(changed: optim.lr 0.001 then, "
                                          r"0.5 now\); resume with the same settings"):
        Trainer(other).fit()
    assert (tmp_path / "run" / "results.json").read_text() == before
    assert (tmp_path / "run" / "config.yaml").read_text() == config_before  # still the run the checkpoints hold
    fresh = tiny_config(tiny_bert, shared_data, tmp_path / "run", "criterion=cross_entropy", "max_steps=1",
                        "resume=false", kept)
    with pytest.raises(RunDirError, match=r"already holds a run \(checkpoint step_00000001.pt\) and resume=false"):
        Trainer(fresh).fit()
    assert (tmp_path / "run" / "results.json").read_text() == before


def test_a_finished_run_is_not_resumed_with_another_batch_size(tiny_bert, shared_data, tmp_path):
    """Finished and its checkpoints removed, or its last checkpoint kept: one line naming the key and both values."""
    for kept in ("keep_checkpoints=null", "keep_checkpoints=1"):
        run = tmp_path / kept
        Trainer(tiny_config(tiny_bert, shared_data, run, "criterion=cross_entropy", "max_steps=2", kept)).fit()
        before = (run / "results.json").read_text()
        with pytest.raises(RunDirError, match=r"holds (the results|a checkpoint) of a different run \(changed: "
                                              r"batch_size 8 then, 4 now\)"):
            Trainer(tiny_config(tiny_bert, shared_data, run, "criterion=cross_entropy", "max_steps=2", kept,
                                "batch_size=4")).fit()
        assert (run / "results.json").read_text() == before


def test_a_finished_run_extended_by_max_steps_trains_on_at_the_new_schedules_rate(tiny_bert, shared_data, tmp_path):
    run = tmp_path / "run"
    for max_steps in (2, 4):
        Trainer(tiny_config(tiny_bert, shared_data, run, "criterion=cross_entropy", f"max_steps={max_steps}",
                            "keep_checkpoints=1")).fit()
    rates = {r["step"]: r["train/lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
             if "train/lr" in r}
    assert rates[2] > 0 and rates[3] == pytest.approx(1e-3 * (4 - 2) / (4 - 0)) and rates[4] == pytest.approx(1e-3 / 4)


def test_an_evaluation_step_that_ends_an_epoch_is_evaluated_once(tiny_bert, shared_data, tmp_path):
    cfg = tiny_config(tiny_bert, shared_data, tmp_path / "run", "criterion=cross_entropy", "eval_every=3")
    results = Trainer(cfg).fit()  # 3 steps per epoch: step 3 is both an eval_every step and an epoch end
    assert [h["step"] for h in results["history"]] == [0, 3, 6]
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    assert [e.step for e in events.Scalars("eval/accuracy")] == [0, 3, 6]


def test_every_run_records_embedding_isotropy_before_and_after_and_collapse(tiny_bert, shared_data, tmp_path):
    cfg = tiny_config(tiny_bert, shared_data, tmp_path / "run", "criterion=spectrum", "criterion.lam=1.0",
                      "eval_before_training=false")
    results = Trainer(cfg).fit()
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    for key in ("embedding_i1", "embedding_i2", "embedding_i1_before", "embedding_i2_before"):
        assert saved[key] == results[key] and 0 <= saved[key] <= 1
    assert saved["embedding_i1"] != saved["embedding_i1_before"]  # the penalty moved the matrix
    assert isinstance(saved["collapsed"], bool)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    assert events.Scalars("eval/embedding_i1")[-1].value == pytest.approx(saved["embedding_i1"])
    assert events.Scalars("embedding/i1_before")[0].value == pytest.approx(saved["embedding_i1_before"])
    assert events.Scalars("train/sigma_max")[-1].value > 0


def test_a_one_class_classifier_is_marked_collapsed(tiny_bert, shared_data, tmp_path):
    cfg = tiny_config(tiny_bert, shared_data, tmp_path / "run", "criterion=flow", "max_steps=1")
    trainer = Trainer(cfg)
    with torch.no_grad():  # a head that ignores its input and always prefers class 1
        trainer.model.model.classifier.weight.zero_()
        trainer.model.model.classifier.bias.copy_(torch.tensor([0.0, 5.0]))
        trainer.model.model.classifier.requires_grad_(False)
    saved = trainer.fit()
    assert saved["collapsed"] is True and saved["history"][0]["collapsed"] is True
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["eval/collapsed"] for r in records if "eval/collapsed" in r] == [True, True]


@pytest.mark.parametrize("setting, extra, computed", [
    ("auto", (), True), ("auto", ("criterion=istar", "criterion.padding=include"), False), ("false", (), False),
    ("true", (), True)])
def test_results_json_records_the_padding_free_the_run_computed_not_its_setting(tiny_bert, shared_data, tmp_path,
                                                                               setting, extra, computed):
    cfg = tiny_config(tiny_bert, shared_data, tmp_path / "run", "max_steps=1", "eval_before_training=false",
                      f"model.padding_free={setting}", *extra)
    Trainer(cfg).fit()
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["padding_free"] is computed
    assert read_results(tmp_path / "run" / "results.json").extra["padding_free"] is computed


def test_istar_padding_include_scores_the_padded_cloud_in_the_penalty_and_sigma_s(tiny_bert, shared_data, tmp_path):
    first = {}
    for padding in ("exclude", "include"):
        cfg = tiny_config(tiny_bert, shared_data, tmp_path / padding, "criterion=istar", "max_steps=1",
                          f"criterion.padding={padding}", "eval_before_training=false",
                          "model.padding_free=false")  # both padded: the same dropout masks at step 1
        Trainer(cfg).fit()
        records = [json.loads(line) for line in (tmp_path / padding / "metrics.jsonl").read_text().splitlines()]
        first[padding] = {key: value for r in records for key, value in r.items()
                          if key.startswith(("train/", "sigma_s/"))}
    # same weights and batch at step 1: only the cloud differs (padded positions are points under include)
    assert first["exclude"]["sigma_s/points"] == first["include"]["sigma_s/points"] == 300
    assert first["exclude"]["sigma_s/isoscore"] != pytest.approx(first["include"]["sigma_s/isoscore"], abs=1e-4)
    assert first["exclude"]["train/isoscore_star"] != pytest.approx(first["include"]["train/isoscore_star"], abs=1e-4)
    assert first["exclude"]["train/task_loss"] == first["include"]["train/task_loss"]  # the same forward pass
