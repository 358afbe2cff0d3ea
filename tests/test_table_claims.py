"""What the report's tables claim from their intervals: a one-seed setting's interval resamples its examples only and is
labelled so, with no verdict over seeds; Table 1's bold marks only a best told apart from every other column; Table 1
shows each setting's chosen lambda and zeta."""
import csv
import json

from istar_plugin.cli import report as report_cli
from istar_plugin.reports.outputs import istar_tables
from istar_plugin.reports.records.cells import collect
from istar_plugin.storage.predictions import write_predictions

REFERENCES = [0, 1] * 50


def cell(grid, method, seed, right, lam=None, zeta=None):
    """A finished RTE run of ``method`` right on exactly the examples ``right`` (of 100), with its predictions.json."""
    name = f"recipe=rte,seed={seed},criterion={method}" + ("" if lam is None else f",lam={lam}")
    run = grid / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"task: rte\nseed: {seed}\n")
    criterion = {"name": method, "lam": lam, "zeta": zeta}
    (run / "results.json").write_text(json.dumps({
        "task": "rte", "model": "minilm", "seed": seed, "step": 10, "main_metric": "accuracy", "criterion": criterion,
        "metrics": {"accuracy": len(right) / 100}, "eval_isoscore_star": 0.1, "data": {"eval": {"examples": 100}}}))
    write_predictions(run, "rte", 10, [r if i in right else 1 - r for i, r in enumerate(REFERENCES)], REFERENCES)


def report(grid, out):
    assert report_cli.main([str(grid), "--out", str(out)]) == 0
    with open(out / "versus_base.csv") as handle:
        versus = {(row["method"], row["lam"]): row for row in csv.DictReader(handle)}
    return versus, (out / "table1.md").read_text()


def test_a_one_seed_setting_is_labelled_examples_only_with_no_verdict_over_seeds(tmp_path):
    grid = tmp_path / "grid"
    for seed in (1, 2, 3):
        cell(grid, "cross_entropy", seed, range(60))
        cell(grid, "cosreg", seed, range(90), lam=1.0)
    cell(grid, "istar", 1, range(90), lam=-1.0, zeta=0.2)  # one seed, 30 points above Base on its examples
    versus, table1 = report(grid, tmp_path / "report")
    one_seed, seeds = versus["I-STAR", "-1.0"], versus["CosReg", "1.0"]
    assert (one_seed["seeds"], one_seed["resampled"], one_seed["verdict"]) == (
        "1", "examples only", "better (one seed: examples only)")
    assert (seeds["seeds"], seeds["resampled"], seeds["verdict"]) == ("3", "seeds and examples", "better")
    markdown = (tmp_path / "report" / "versus_base.md").read_text()
    assert "| better (one seed: examples only) | +30.00 | 0/1 | examples only |" in markdown
    assert "| I-STAR | -1 | 0.2 | — | accuracy | 1 | +30.00 | [+" in markdown
    # its Table 1 cell carries the same mark, and the one-seed setting ties CosReg's mean: neither is bold
    assert "better (one seed: examples only)" in table1 and "**" not in table1


def test_bold_marks_only_a_best_told_apart_from_every_other_column_not_one_told_apart_from_base_alone(tmp_path):
    told_apart, close = tmp_path / "told_apart", tmp_path / "close"
    for seed in (1, 2, 3):
        for grid in (told_apart, close):
            cell(grid, "cross_entropy", seed, range(50))
        cell(told_apart, "cosreg", seed, range(60), lam=1.0)
        cell(told_apart, "istar", seed, range(90), lam=-1.0, zeta=0.2)
        cell(close, "cosreg", seed, range(10, 70), lam=1.0)  # 60 right ...
        cell(close, "istar", seed, range(61), lam=-1.0, zeta=0.2)  # ... and 61, on other examples: the best, barely
    _, table1 = report(told_apart, tmp_path / "told_apart_report")
    assert "| minilm | rte | accuracy | 50.00 ± 0.00 | 60.00 ± 0.00 (λ +1) · Δ +10.00 [" in table1
    assert "| **90.00 ± 0.00 (λ -1, ζ 0.2) · Δ +40.00 [" in table1 and table1.count("**") == 2
    versus, table1 = report(close, tmp_path / "close_report")
    assert versus["I-STAR", "-1.0"]["verdict"] == "better"  # told apart from Base, not from CosReg
    assert "61.00 ± 0.00 (λ -1, ζ 0.2) · Δ +11.00 [" in table1 and "**" not in table1
    rows = istar_tables.table1(collect(close)[0])
    assert rows[0][istar_tables.DISTINGUISHED] == {"accuracy": None}
    assert istar_tables.table1(collect(told_apart)[0])[0][istar_tables.DISTINGUISHED] == {"accuracy": "I-STAR"}
    assert "told apart from every other column" in table1.splitlines()[0]


def test_table1_shows_each_settings_chosen_lambda_and_zeta(tmp_path):
    grid = tmp_path / "grid"
    for seed in (1, 2):
        cell(grid, "cross_entropy", seed, range(60))
        cell(grid, "istar", seed, range(62), lam=0.3, zeta=0.2)  # the best I-STAR: a positive lambda ...
        cell(grid, "istar", seed, range(55), lam=-1.0, zeta=0.2)
        cell(grid, "cosreg", seed, range(58), lam=1.0)
    _, table1 = report(grid, tmp_path / "report")
    (line,) = [line for line in table1.splitlines() if line.startswith("| minilm")]
    base, cosreg, istar = line.split(" | ")[3:6]
    assert base == "60.00 ± 0.00"  # Base has neither
    assert cosreg.startswith("58.00 ± 0.00 (λ +1) · Δ -2.00")
    # ... shown as one: a positive lambda raises isotropy
    assert istar.removeprefix("**").startswith("62.00 ± 0.00 (λ +0.3, ζ 0.2) · Δ +2.00")
