"""Edges of issue 37 where a run or report went on as if nothing were wrong: language modelling on texts too short to
predict a token (a NaN perplexity, a 0 loss); a paired interval against Base that fell back to the seeds alone without
saying why."""
import csv
import json
import math

import pytest

from istar_plugin.cli import report as report_cli
from istar_plugin.cli.run import main as istar_run
from istar_plugin.reports.comparisons import versus_base
from istar_plugin.reports.records.cells import collect
from istar_plugin.storage.predictions import write_predictions
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
