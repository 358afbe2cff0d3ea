"""istar-report on records it cannot trust: predictions.json files that cannot be paired with Base's examples (other
references, missing beside others) make the comparison fall back to the seeds alone, saying why once; records that
cannot be true (a metric outside its range, a seed or task that contradicts config.yaml, a predictions.json that is
damaged, of another task, step or length, or recomputes to other metrics than results.json) are listed as problems,
never averaged."""
import csv
import json
import shutil
from pathlib import Path

import pytest

from istar_plugin.cli import report as report_cli
from istar_plugin.reports.comparisons import versus_base
from istar_plugin.reports.records.cells import collect
from istar_plugin.storage.predictions import write_predictions

EVIDENCE = Path(__file__).resolve().parents[1] / "docs" / "evidence" / "replication_glue_minilm"


# ----------------------------------------------------------------------------------- predictions that cannot be paired
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
UNPAIRABLE = {
    "other references": (lambda cell: edit_predictions(cell, references=[1, 0] * 50,
                                                        predictions=[1, 0] * 46 + [0, 1] * 4),  # 92 right, as recorded
                         "does not match the references of recipe=rte,seed=2,criterion=cross_entropy"),
    "missing beside others": (lambda cell: (cell / "predictions.json").unlink(), "is missing"),
}


@pytest.mark.parametrize("name", list(UNPAIRABLE))
def test_a_comparison_that_cannot_pair_a_runs_examples_says_why_and_the_report_warns_once(name, tmp_path, capsys):
    grid = paired_grid(tmp_path / "grid")
    tamper, problem = UNPAIRABLE[name]
    tamper(grid / ISTAR2)
    assert report_cli.main([str(grid), "--out", str(tmp_path / "report")]) == 0
    captured = capsys.readouterr()
    assert captured.err == (f"istar-report: warning: {grid / ISTAR2 / 'predictions.json'} {problem}: compared with "
                            "Base by its seed alone, not its examples\n")
    with open(tmp_path / "report" / "versus_base.csv") as handle:
        (row,) = csv.DictReader(handle)
    assert row["resampled"] == f"seeds (predictions.json of {ISTAR2} {problem})" and row["verdict"] == "better"
    assert f"| seeds (predictions.json of {ISTAR2} {problem}) |" in captured.out


SELF_CONTRADICTING = {
    "damaged": (lambda cell: (cell / "predictions.json").write_text('{"task": "rte"'),
                "is damaged (unreadable (Expecting ',' delimiter: line 1 column 15 (char 14))): its results.json "
                "cannot be checked"),
    "another length": (lambda cell: edit_predictions(cell, predictions=[0] * 80, references=[0, 1] * 40),
                       "holds 80 examples, its results.json's evaluation split 100"),
    "another task": (lambda cell: edit_predictions(cell, task="sst2"), "is of task sst2, its results.json of rte"),
    "another step": (lambda cell: edit_predictions(cell, step=4),
                     "is of step 4, its results.json of step 10 (written by another attempt)"),
    "another attempt's predictions": (
        lambda cell: edit_predictions(cell, predictions=[0, 1] * 45 + [1, 0] * 5),
        "gives accuracy 0.9, its results.json 0.92 (one of them was edited, or written by another attempt)"),
    "an edited accuracy": (lambda cell: tamper_results(cell, accuracy=0.95),
                           "gives accuracy 0.92, its results.json 0.95 (one of them was edited, or written by another "
                           "attempt)"),
}


@pytest.mark.parametrize("name", list(SELF_CONTRADICTING))
def test_a_run_whose_predictions_contradict_its_results_is_a_problem_left_out_of_every_table(name, tmp_path, capsys):
    grid = paired_grid(tmp_path / "grid")
    tamper, problem = SELF_CONTRADICTING[name]
    tamper(grid / ISTAR2)
    assert report_cli.main([str(grid), "--out", str(tmp_path / "report")]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.split("metrics recomputed from predictions.json")[1] == (
        ", agreeing with results.json: 3 of 3 finished cells\n"
        "missing or failed cells: 1\n"
        f"  {grid / ISTAR2}: predictions.json {problem}; left out\n")
    with open(tmp_path / "report" / "versus_base.csv") as handle:
        (row,) = csv.DictReader(handle)
    assert (row["seeds"], row["per_seed"]) == ("1", "+30.00")  # seed 1 alone: seed 2 of I-STAR is left out
    table1 = (tmp_path / "report" / "table1.md").read_text()
    assert "91.00 ± — (λ -1, n=1)" in table1 and "92.00" not in table1 and "95.00" not in table1
    with open(tmp_path / "report" / "cells.csv") as handle:
        assert ISTAR2 not in handle.read()


def test_a_grid_without_predictions_is_reported_unchecked_cell_by_cell(tmp_path, capsys):
    grid = paired_grid(tmp_path / "grid", seeds=(1,))
    (grid / "recipe=rte,seed=1,criterion=istar" / "predictions.json").unlink()
    assert report_cli.main([str(grid), "--out", str(tmp_path / "report")]) == 0
    assert capsys.readouterr().out.split("finished cells; report in")[1].split("\n", 1)[1] == (
        "metrics recomputed from predictions.json, agreeing with results.json: 1 of 2 finished cells\n"
        f"  {grid / 'recipe=rte,seed=1,criterion=istar'}: not recomputed (no predictions.json)\n"
        "missing or failed cells: 0\n")


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
    edit_predictions(grid / "recipe=rte,seed=1,criterion=istar", references=[1, 0] * 50,
                     predictions=[1, 0] * 45 + [1, 1] + [0, 1] * 4)  # 91 right, as recorded
    (row,) = versus_base.comparisons(collect(grid)[0])
    paired = row["paired"]
    assert paired.verdict == "undefined (one seed)" and paired.resampled == (
        "seeds (predictions.json of recipe=rte,seed=1,criterion=istar does not match the references of "
        "recipe=rte,seed=1,criterion=cross_entropy)")




# ------------------------------------------------------------------------------------ results that cannot be true
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


# ----------------------------------------------------------------------------- an archive whose record was edited
def test_an_archive_with_an_edited_results_json_is_refused_cell_by_cell_and_an_unedited_one_is_not(tmp_path, capsys):
    archive = tmp_path / "archive"
    for cell in sorted(EVIDENCE.glob("recipe=rte,*")):  # RTE's Base and lambda -1 of the archived GLUE replication
        if cell.name.endswith(("cross_entropy", "lam=-1,padding=include")):
            shutil.copytree(cell, archive / cell.name)
    assert report_cli.main([str(archive), "--out", str(tmp_path / "unedited")]) == 0
    cells = len(list(archive.iterdir()))
    assert capsys.readouterr().out.split(f"{cells} finished cells; report in {tmp_path / 'unedited'}\n")[1] == (
        f"metrics recomputed from predictions.json, agreeing with results.json: {cells} of {cells} finished cells\n"
        "missing or failed cells: 0\n")
    edited = archive / "recipe=rte,seed=2,criterion=istar,lam=-1,padding=include"
    stored = json.loads((edited / "results.json").read_text())["metrics"]["accuracy"]
    tamper_results(edited, accuracy=0.75)
    assert report_cli.main([str(archive), "--out", str(tmp_path / "edited")]) == 0
    assert capsys.readouterr().out.split("missing or failed cells: ")[1] == (
        f"1\n  {edited}: predictions.json gives accuracy {stored!r}, its results.json 0.75 (one of them was edited, "
        "or written by another attempt); left out\n")
    with open(tmp_path / "edited" / "versus_base.csv") as handle:
        (row,) = [row for row in csv.DictReader(handle) if (row["method"], row["lam"]) == ("I-STAR", "-1.0")]
    assert row["seeds"] == "4" and len(row["per_seed"].split()) == 4
    with open(tmp_path / "edited" / "table1.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["I-STAR lam"], row["I-STAR n"]) == ("-1.0", "4")  # the four unedited seeds
