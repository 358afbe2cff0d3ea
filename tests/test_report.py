"""istar-report on a synthetic grid whose means, stds and best settings are known by construction.

Every setting's three seeds score mean - s, mean, mean + s (so the sample std is exactly s) and its
IsoScore* is iso - 0.01, iso, iso + 0.01 (std 0.01).
"""
import csv
import json
import shutil
from dataclasses import replace

import pytest

from istar_plugin.cli import report as report_cli
from istar_plugin.reports.grid_report import FIGURES, TABLES, write_report
from istar_plugin.reports.outputs import istar_figures
from istar_plugin.reports.outputs import istar_tables as report
from istar_plugin.reports.records import cells as istar_cells
from istar_plugin.reports.records import settings as istar_settings
from istar_plugin.reports.tables import Table, write_table

SEEDS = (1, 2, 3)
BASE = {"sst2": 90.0, "squad": 80.0}  # sst2 stores accuracy in [0, 1]; squad stores f1 already x100
MODEL_OFFSET = {"bert": 2.0, "albert": 0.0}
STD = {"cross_entropy": 0.5, "cosreg": 1.0, "istar": 2.0}
BONUS = {  # (method, lam, zeta) -> points above Base
    "bert": {("cross_entropy", None, None): 0.0, ("cosreg", -1.0, None): -0.5, ("cosreg", 1.0, None): 0.3,
             ("istar", -1.0, 0.2): 0.5, ("istar", -5.0, 0.2): 1.5, ("istar", 1.0, 0.2): -1.0,
             ("istar", -5.0, 0.6): 1.0},
    "albert": {("cross_entropy", None, None): 0.0, ("cosreg", -1.0, None): 0.4, ("cosreg", 1.0, None): -0.2,
               ("istar", -1.0, 0.2): 0.8, ("istar", -5.0, 0.2): 0.2, ("istar", 1.0, 0.2): -0.5,
               ("istar", -5.0, 0.6): 1.2},
}
FINISHED = len(BASE) * sum(len(bonus) for bonus in BONUS.values()) * len(SEEDS)  # 84


def isoscore(lam, zeta):
    return 0.2 if lam is None else 0.2 + 0.03 * lam + (0.01 if zeta == 0.6 else 0.0)


def criterion(method, lam, zeta):
    if method == "cross_entropy":
        return {"name": method}
    if method == "cosreg":
        return {"name": method, "lam": lam}
    return {"name": method, "lam": lam, "zeta": zeta, "shrinkage_points": 250000, "layers": None,
            "shrinkage_mode": "eval", "distributed_cloud": "pooled"}


def write_cell(directory, task, model, method, lam, zeta, seed, score, iso):
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(f"task: {task}\nseed: {seed}\n")
    metric = "f1" if task == "squad" else "accuracy"
    value = score if task == "squad" else score / 100
    results = {"task": task, "model": model, "seed": seed, "step": 100, "epoch": 1,
               "criterion": criterion(method, lam, zeta), "main_metric": metric, metric: value,
               "metrics": {metric: value, "eval_isoscore_star": iso, "eval_isoscore_star_per_layer": [iso, iso]},
               "eval_isoscore_star": iso, "eval_isoscore_star_per_layer": [iso, iso], "initial": None, "history": []}
    (directory / "results.json").write_text(json.dumps(results))


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid")
    for task in BASE:
        nesting = root / "batch1" / task if task == "squad" else root / task  # cells sit at different depths
        for model, bonuses in BONUS.items():
            for (method, lam, zeta), bonus in bonuses.items():
                mean = BASE[task] + MODEL_OFFSET[model] + bonus
                for seed, sign in zip(SEEDS, (-1, 0, 1)):
                    cell = nesting / model / f"{method}_lam{lam}_zeta{zeta}" / f"seed{seed}"
                    write_cell(cell, task, model, method, lam, zeta, seed,
                               mean + sign * STD[method], isoscore(lam, zeta) + sign * 0.01)
    missing = root / "sst2" / "bert" / "istar_lam-10.0_zeta0.2" / "seed1"
    (missing / "logs").mkdir(parents=True)
    (missing / "config.yaml").write_text("task: sst2\n")
    (missing / "logs" / "123_0_log.err").write_text("train: 10%|#  | 10/100\r\nRuntimeError: CUDA out of memory\n\n")
    (missing / "checkpoints").mkdir()
    (missing / "checkpoints" / "step_00000050.pt").write_bytes(b"")
    corrupt = root / "batch1" / "squad" / "albert" / "cosreg_lam2.0_zetaNone" / "seed1"
    corrupt.mkdir(parents=True)
    (corrupt / "config.yaml").write_text("task: squad\n")
    (corrupt / "results.json").write_text('{"task": "squad", "model": "alb')
    return root


@pytest.fixture(scope="module")
def collected(grid):
    return istar_cells.collect(grid)


def test_collect_reads_every_finished_cell_and_lists_the_others(grid, collected):
    records, problems = collected
    assert len(records) == FINISHED
    by_key = {(r.task, r.model, r.method, r.lam, r.zeta, r.seed): r for r in records}
    sst2 = by_key["sst2", "bert", "istar", -5.0, 0.2, 3]
    assert (sst2.metric, sst2.value, sst2.isoscore_star) == ("accuracy", pytest.approx(0.955), pytest.approx(0.06))
    assert sst2.score == pytest.approx(95.5)  # fractions are shown x100
    squad = by_key["squad", "albert", "cross_entropy", None, None, 1]
    assert (squad.metric, squad.value, squad.score) == ("f1", 79.5, 79.5)  # SQuAD is already a percentage
    assert squad.path == str(grid / "batch1" / "squad" / "albert" / "cross_entropy_lamNone_zetaNone" / "seed1")
    reasons = dict(problems)
    assert len(problems) == 2
    missing = reasons[str(grid / "sst2" / "bert" / "istar_lam-10.0_zeta0.2" / "seed1")]
    assert missing.startswith("no results.json")
    assert "last checkpoint step_00000050.pt" in missing and missing.endswith("RuntimeError: CUDA out of memory")
    corrupt = reasons[str(grid / "batch1" / "squad" / "albert" / "cosreg_lam2.0_zetaNone" / "seed1")]
    assert corrupt.startswith("unreadable results.json")


def test_table1_has_mean_and_sample_std_of_each_methods_best_setting(collected):
    rows = report.table1(collected[0])
    assert [(row["model"], row["task"], row["metric"]) for row in rows] == [
        ("albert", "squad", "f1"), ("albert", "sst2", "accuracy"), ("bert", "squad", "f1"),
        ("bert", "sst2", "accuracy")]
    assert report.method_columns(rows) == ["Base", "CosReg", "I-STAR"]
    bert_sst2, albert_squad = rows[3], rows[0]
    expected = {  # row -> method -> (mean, std, lam, zeta)
        "bert_sst2": {"Base": (92.0, 0.5, None, None), "CosReg": (92.3, 1.0, 1.0, None),
                      "I-STAR": (93.5, 2.0, -5.0, 0.2)},
        "albert_squad": {"Base": (80.0, 0.5, None, None), "CosReg": (80.4, 1.0, -1.0, None),
                         "I-STAR": (81.2, 2.0, -5.0, 0.6)},
    }
    for name, row in (("bert_sst2", bert_sst2), ("albert_squad", albert_squad)):
        for method, (mean, std, lam, zeta) in expected[name].items():
            setting = row[method]
            assert (setting.mean, setting.std) == (pytest.approx(mean), pytest.approx(std)), (name, method)
            assert (setting.lam, setting.zeta, setting.seeds) == (lam, zeta, SEEDS)
    markdown = report.table1_markdown(rows)
    assert "| Model | Task | Metric | Base | CosReg | I-STAR |" in markdown
    # I-STAR's best is above CosReg's on every seed, but not told apart from Base's (+0.0 on seed 1): not bold
    assert ("| bert | sst2 | accuracy | 92.00 ± 0.50 · paper 92.40 ± 0.41 (-0.40) | "
            "92.30 ± 1.00 (λ +1) · paper 92.01 ± 0.23 (+0.29) | "
            "93.50 ± 2.00 (λ -5, ζ 0.2) · paper 92.65 ± 0.18 (+0.85) |") in markdown


def test_table2_lists_the_selected_lambda_and_zeta(collected):
    rows = report.table2(collected[0])
    selected = {(row["model"], row["task"], row["method"]): (row["lam"], row["zeta"], row["settings_compared"])
                for row in rows}
    assert len(rows) == 8  # Base has no hyperparameter to choose
    assert selected["bert", "sst2", "I-STAR"] == (-5.0, 0.2, 4)
    assert selected["albert", "sst2", "I-STAR"] == (-5.0, 0.6, 4)
    assert selected["bert", "squad", "CosReg"] == (1.0, None, 2)
    assert selected["albert", "squad", "CosReg"] == (-1.0, None, 2)
    assert "| bert | sst2 | I-STAR | -5 | 0.2 | 93.50 ± 2.00 | 4 |" in report.table2_markdown(rows)


def test_one_seed_is_marked(collected):
    first_seed = [record for record in collected[0] if record.seed == 1]
    markdown = report.table1_markdown(report.table1(first_seed))
    assert ("| bert | sst2 | accuracy | 91.50 ± — (n=1) · paper 92.40 ± 0.41 (-0.90) | "
            "91.30 ± — (λ +1, n=1) · paper 92.01 ± 0.23 (-0.71) | "
            "91.50 ± — (λ -5, ζ 0.2, n=1) · paper 92.65 ± 0.18 (-1.15) |") in markdown  # one seed: nothing bold


def test_a_setting_with_fewer_seeds_does_not_compete_with_fuller_ones(collected):
    records = [r for r in collected[0] if not (r.model == "bert" and r.task == "sst2" and r.method == "cosreg"
                                               and r.lam == 1.0 and r.seed == 3)]
    rows = report.table1(records)
    # seeds 1-2 of lam 1 (91.8) beat lam -1 (91.5) by mean, but lam -1 has all three seeds
    assert (rows[3]["CosReg"].lam, rows[3]["CosReg"].n) == (-1.0, 3)
    assert "| 91.50 ± 1.00 (λ -1) · paper 92.01 ± 0.23 (-0.51) |" in report.table1_markdown(rows)
    compared = {(row["model"], row["task"], row["method"]): row["settings_compared"] for row in report.table2(records)}
    assert compared["bert", "sst2", "CosReg"] == 1


def test_fewer_seeds_than_the_grid_are_marked(collected):
    records = [r for r in collected[0] if not (r.model == "bert" and r.task == "sst2" and r.method == "cosreg"
                                               and r.seed == 3)]
    rows = report.table1(records)
    # both CosReg settings have seeds 1-2: lam 1 (91.8) beats lam -1 (91.0)
    assert (rows[3]["CosReg"].lam, rows[3]["CosReg"].n) == (1.0, 2)
    assert ("| 92.00 ± 0.50 · paper 92.40 ± 0.41 (-0.40) | 91.80 ± 0.71 (λ +1, n=2) · paper 92.01 ± 0.23 (-0.21) | "
            "93.50 ± 2.00 (λ -5, ζ 0.2) · paper 92.65 ± 0.18 (+0.85) |") in report.table1_markdown(rows)


def test_a_duplicate_seed_is_a_problem_not_a_second_sample(grid, tmp_path):
    copy = tmp_path / "grid"
    shutil.copytree(grid / "sst2" / "bert", copy / "a" / "bert")
    shutil.copytree(grid / "sst2" / "bert" / "cosreg_lam1.0_zetaNone" / "seed2", copy / "b" / "rerun")
    records, problems = istar_cells.collect(copy)
    assert len(records) == 7 * 3 + 0
    assert problems[-1][0] == str(copy / "b" / "rerun") and problems[-1][1].startswith("duplicate of ")


def counted_opens(monkeypatch):
    """A counter of the files opened (path -> times) from now on."""
    import builtins
    import collections
    import io

    opened, real_open = collections.Counter(), builtins.open

    def counting_open(file, *args, **kwargs):
        opened[str(file)] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)
    return opened


def test_collect_reads_each_record_file_of_a_cell_once(tmp_path, monkeypatch):
    cell = tmp_path / "grid" / "seed1"
    write_cell(cell, "sst2", "bert", "istar", -1.0, 0.2, 1, 91.0, 0.1)
    opened = counted_opens(monkeypatch)
    (record,), problems = istar_cells.collect(tmp_path / "grid")
    assert problems == [] and record.score == pytest.approx(91.0)
    assert {name: opened[str(cell / name)] for name in ("config.yaml", "results.json")} == {
        "config.yaml": 1, "results.json": 1}


def test_a_report_reads_the_record_files_of_each_cell_once_for_all_its_outputs(tmp_path, monkeypatch, capsys):
    from istar_plugin.storage.predictions import write_predictions
    cells = []
    for method, lam, zeta, seed, correct in (("istar", -1.0, 0.2, 1, 93), ("istar", -1.0, 0.2, 2, 94),
                                             ("cross_entropy", None, None, 1, 90),
                                             ("cross_entropy", None, None, 2, 92)):
        cells.append(tmp_path / "grid" / f"{method}_seed{seed}")
        write_cell(cells[-1], "sst2", "bert", method, lam, zeta, seed, float(correct), 0.1)
        write_predictions(cells[-1], "sst2", 100, [1] * correct + [0] * (100 - correct), [1] * 100)
        results = json.loads((cells[-1] / "results.json").read_text())
        (cells[-1] / "results.json").write_text(json.dumps({**results, "provenance": {"host": "machine-a"}}))
        (cells[-1] / "attempts.jsonl").write_text("".join(json.dumps({"event": event, "host": "machine-a",
                                                                      "time": time}) + "\n"
                                                          for event, time in (("start", 1000.0), ("finished", 1060.0))))
    opened = counted_opens(monkeypatch)
    assert report_cli.main([str(tmp_path / "grid"), "--out", str(tmp_path / "report")]) == 0
    assert "| bert | sst2 | I-STAR | -1 | 0.2 | — | accuracy | 2 | +2.50 |" in capsys.readouterr().out
    assert [[opened[str(cell / name)] for name in ("results.json", "predictions.json", "attempts.jsonl")]
            for cell in cells] == [[1, 1, 1]] * len(cells)


def test_a_report_against_a_reference_reads_each_predictions_json_once(tmp_path, monkeypatch, capsys):
    from istar_plugin.storage.predictions import write_predictions
    cells = []
    for precision, seed, correct in (("fp32", 1, 90), ("fp32", 2, 92), ("bf16", 1, 91), ("bf16", 2, 92)):
        cells.append(tmp_path / "grid" / f"{precision}_seed{seed}")
        write_cell(cells[-1], "sst2", "bert", "cross_entropy", None, None, seed, float(correct), 0.1)
        (cells[-1] / "config.yaml").write_text(f"task: sst2\nseed: {seed}\nprecision: {precision}\n")
        write_predictions(cells[-1], "sst2", 100, [1] * correct + [0] * (100 - correct), [1] * 100)
    opened = counted_opens(monkeypatch)
    assert report_cli.main([str(tmp_path / "grid"), "--out", str(tmp_path / "report"),
                            "--reference", "precision=fp32"]) == 0
    assert "| precision=bf16 | precision=fp32 | accuracy | 2 | +0.50 |" in (tmp_path / "report" /
                                                                          "versus_reference.md").read_text()
    assert [opened[str(cell / "predictions.json")] for cell in cells] == [1] * len(cells)


def test_a_report_compares_every_setting_with_base_once(collected, tmp_path, monkeypatch):
    """Figure 3 draws the comparisons of versus_base.md, not comparisons of its own."""
    from istar_plugin.reports.comparisons import versus_base
    calls, real = [], versus_base.comparisons
    monkeypatch.setattr(versus_base, "comparisons",
                        lambda records, *read: calls.append(len(records)) or real(records, *read))
    write_report(collected[0], tmp_path / "report")
    assert (tmp_path / "report" / "figure3.png").is_file() and calls == [FINISHED]


def test_a_report_computes_each_comparison_and_its_bootstrap_once(collected, tmp_path, monkeypatch):
    """Table 1's bold, versus_base.md and Figure 3 share the comparisons they have in common."""
    import collections

    from istar_plugin.reports.comparisons import versus_base
    computed, real = collections.Counter(), versus_base.paired_difference

    def counting(task, metric, method, base, scores=None, **options):
        computed[task, metric, repr(scores)] += 1
        return real(task, metric, method, base, scores=scores, **options)

    monkeypatch.setattr(versus_base, "paired_difference", counting)
    write_report(collected[0], tmp_path / "report")
    assert computed and max(computed.values()) == 1


def test_a_queued_cell_with_only_its_snapshot_is_listed_as_missing(tmp_path):
    queued = tmp_path / "grid" / "sst2_seed1"
    queued.mkdir(parents=True)
    (queued / "cell.yaml").write_text("task: sst2\nseed: 1\n")  # submitted, never started: no config.yaml yet
    records, problems = istar_cells.collect(tmp_path / "grid")
    assert records == [] and [(path, reason.split(" (")[0]) for path, reason in problems] == [
        (str(queued), "no results.json")]


def test_a_swept_learning_rate_is_a_setting_of_its_own_not_a_duplicate_seed(tmp_path):
    grid = tmp_path / "grid"
    for lr, mean in ((1e-5, 91.0), (3e-5, 93.0)):
        for seed, sign in zip(SEEDS, (-1, 0, 1)):
            for method, lam, zeta, bonus in (("istar", -1.0, 0.2, 1.0), ("cross_entropy", None, None, 0.0)):
                cell = grid / f"{method}_lr{lr}_seed{seed}"
                write_cell(cell, "sst2", "bert", method, lam, zeta, seed, mean + bonus + sign * 0.5, 0.1)
                (cell / "config.yaml").write_text(f"task: sst2\nseed: {seed}\noptim: {{lr: {lr}, epochs: 3}}\n"
                                                  f"output_dir: {cell}\n")
    records, problems = istar_cells.collect(grid)
    assert problems == [] and len(records) == 12
    assert {record.variant for record in records} == {"optim.lr=1e-05", "optim.lr=3e-05"}
    # Base's learning rate is a choice now, too: it gets a row of its own
    table = {r["method"]: (r["variant"], r["mean"], r["settings_compared"]) for r in report.table2(records)}
    assert table == {"Base": ("optim.lr=3e-05", pytest.approx(93.0), 2),
                     "I-STAR": ("optim.lr=3e-05", pytest.approx(94.0), 2)}
    assert "| bert | sst2 | I-STAR | -1 | 0.2 | optim.lr=3e-05 | 94.00 ± 0.50 | 2 |" in report.table2_markdown(
        report.table2(records))
    assert [(lam, setting.variant) for lam, setting in istar_figures.figure3_points(records)["sst2"]["bert"]] == [
        (-1.0, "optim.lr=3e-05"), (0.0, "optim.lr=3e-05")]


def test_figure3_points_take_each_lambdas_best_zeta_and_base_as_lambda_0(collected):
    points = istar_figures.figure3_points(collected[0])
    assert list(points) == ["squad", "sst2"]
    bert = points["sst2"]["bert"]
    assert [lam for lam, _ in bert] == [-5.0, -1.0, 0.0, 1.0]
    assert bert[0][1].zeta == 0.2 and points["sst2"]["albert"][0][1].zeta == 0.6
    assert bert[2][1].method == "cross_entropy"
    assert (bert[0][1].isoscore_mean, bert[0][1].isoscore_std) == (pytest.approx(0.05), pytest.approx(0.01))


def test_figure3_points_leave_out_an_istar_setting_without_a_lambda():
    istar = istar_cells.Record("rte", "minilm", "istar", None, None, 1, "accuracy", 0.9, 90.0, 0.1, "/g/1")
    base = replace(istar, method="cross_entropy", score=60.0, path="/g/2")
    assert istar_figures.figure3_points([istar, base]) == {}
    with_lam = replace(istar, lam=-1.0, path="/g/3")
    assert [lam for lam, _ in istar_figures.figure3_points([istar, base, with_lam])["rte"]["minilm"]] == [-1.0, 0.0]


def test_figures_pick_the_lowest_perplexity_as_the_best_setting():
    def run(method, lam, zeta, seed, perplexity, layers=None):
        return istar_cells.Record("lm", "gpt2", method, lam, zeta, seed, "perplexity", perplexity, perplexity, 0.1,
                                  f"/g/{method}{lam}{zeta}{layers}{seed}", layers=layers)

    records = [run(*setting, seed, perplexity + seed) for seed in (1, 2)
               for *setting, perplexity in (("istar", -1.0, 0.2, 20.0), ("istar", -1.0, 0.6, 30.0),
                                            ("cross_entropy", None, None, 25.0))]
    [(lam, best), (base_lam, base)] = istar_figures.figure3_points(records)["lm"]["gpt2"]
    assert (lam, best.zeta, best.mean) == (-1.0, 0.2, pytest.approx(21.5))
    assert (base_lam, base.mean) == (0.0, pytest.approx(26.5))
    layered = [run("istar", -1.0, zeta, seed, perplexity + seed, layers=(2,)) for seed in (1, 2)
               for zeta, perplexity in ((0.2, 40.0), (0.6, 35.0))]
    panel = istar_figures.figure8_points(records + layered)["lm", "gpt2"]
    assert [(layer, s.zeta, s.mean) for layer, s in panel["layers"]] == [(2, 0.6, pytest.approx(36.5))]
    assert (panel["global"].zeta, panel["global"].mean) == (0.2, pytest.approx(21.5))


@pytest.mark.parametrize("tasks", [("sst2",), ("sst2", "squad")])
def test_figure3_writes_a_png(collected, tmp_path, tasks):
    records = [record for record in collected[0] if record.task in tasks]
    path = istar_figures.figure3(records, tmp_path / "figure3.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_main_writes_every_output_and_lists_problems(grid, tmp_path, capsys):
    out = tmp_path / "report"
    assert report_cli.main([str(grid), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert ("| bert | sst2 | accuracy | 92.00 ± 0.50 · paper 92.40 ± 0.41 (-0.40) | "
            "92.30 ± 1.00 (λ +1) · paper 92.01 ± 0.23 (+0.29) · Δ +0.30 [-0.20, +0.80] n.d. | "
            "93.50 ± 2.00 (λ -5, ζ 0.2) · paper 92.65 ± 0.18 (+0.85) · Δ +1.50 [+0.00, +3.00] n.d. |") in printed
    assert printed.startswith("Table 1: each method's best setting by its mean over seeds on the evaluation split, "
                              "as the paper selects, among its settings with the most seeds: the score is optimistic")
    # no predictions.json in this grid: the seeds alone are resampled, and 3 seeds bound the interval by their range
    assert ("| bert | sst2 | I-STAR | -1 | 0.2 | — | accuracy | 3 | +0.50 | [-1.00, +2.00] | not distinguishable | "
            "-1.00 +0.50 +2.00 | 0/3 | seeds |") in printed
    assert "missing or failed cells: 2" in printed and "istar_lam-10.0_zeta0.2" in printed
    assert sorted(p.name for p in out.iterdir()) == [".istar-report", "cells.csv", "figure3.png", "power.csv",
                                                      "power.md", "provenance.csv", "provenance.md", "table1.csv",
                                                      "table1.md", "table2.csv", "table2.md", "versus_base.csv",
                                                      "versus_base.md"]
    # these cells recorded no provenance and no attempts: nothing is claimed about where they ran
    assert ("| not recorded | not recorded | not recorded | not recorded | not recorded | not recorded | "
            f"{FINISHED} (squad {FINISHED // 2}, sst2 {FINISHED // 2}) |") in printed
    with open(out / "versus_base.csv") as handle:
        versus = list(csv.DictReader(handle))
    assert len(versus) == 24 and {row["resampled"] for row in versus} == {"seeds"}  # 2 tasks x 2 models x 6 settings
    with open(out / "cells.csv") as handle:
        cells = list(csv.DictReader(handle))
    assert len(cells) == FINISHED and list(cells[0]) == ["task", "model", "method", "lam", "zeta", "seed", "metric",
                                                          "value", "score", "isoscore_star", "path", "variant",
                                                          "collapsed", "others", "layers", "validation",
                                                          "seconds", "unchecked"]
    assert {cell["lam"] for cell in cells if cell["method"] == "cross_entropy"} == {""}
    with open(out / "table1.csv") as handle:
        table = {(row["model"], row["task"]): row for row in csv.DictReader(handle)}
    assert float(table["bert", "sst2"]["I-STAR mean"]) == pytest.approx(93.5)
    assert float(table["bert", "sst2"]["I-STAR std"]) == pytest.approx(2.0)
    assert (table["bert", "sst2"]["I-STAR lam"], table["bert", "sst2"]["I-STAR zeta"]) == ("-5.0", "0.2")
    assert table["albert", "sst2"]["CosReg mean"] == "90.4"  # not 90.40000000000002
    with open(out / "table2.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 8
    assert (out / "table1.md").read_text() in printed


@pytest.mark.parametrize("damaged, why", [
    (b'{"event": "finished", "time": 1\n', "attempts.jsonl: line 2 is not valid JSON: "),
    (b'{"event": "finished", "time": 1\xff0}\n', "not UTF-8 text (byte 0xff at offset 64)"),
    (b'{"event": "finished", "time": "1600"}\n', 'attempts.jsonl: a finished record\'s "time" is "1600", not a num')])
def test_a_wall_time_not_from_a_damaged_attempts_log_says_where_it_came_from(tmp_path, capsys, damaged, why):
    for seed in SEEDS:
        cell = tmp_path / "grid" / f"seed{seed}"
        write_cell(cell, "sst2", "bert", "cross_entropy", None, None, seed, 90.0, 0.2)
        finished = damaged if seed == 2 else b'{"event": "finished", "time": 1600}\n'
        (cell / "attempts.jsonl").write_bytes(b'{"event": "start", "time": 1000}\n' + finished)
        (cell / "metrics.jsonl").write_text('{"time": 1030}\n{"time": 1500}\n')
    assert report_cli.main([str(tmp_path / "grid"), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    with open(tmp_path / "report" / "cells.csv") as handle:
        assert [float(cell["seconds"]) for cell in csv.DictReader(handle)] == [600.0, 470.0, 600.0]
    assert "wall times not from attempts.jsonl: 1\n" in printed
    noted = printed.split("wall times not from attempts.jsonl: 1\n")[1].split("\n")[0]
    assert noted.startswith(f"  {tmp_path / 'grid' / 'seed2'}: wall time from metrics.jsonl (first to last record), "
                            "its attempts.jsonl being damaged: ") and why in noted
    with open(tmp_path / "report" / "wall_times.csv") as handle:
        assert list(next(csv.DictReader(handle))) == ["model", "task", "method", "variant", "cells", "median s",
                                                      "min s", "max s"]


def test_main_on_default_out_dir(grid, capsys):
    assert report_cli.main([str(grid)]) == 0
    assert (grid / "report" / "figure3.png").is_file()
    shutil.rmtree(grid / "report")


def test_main_without_cells_exits_2(tmp_path, capsys):
    assert report_cli.main([str(tmp_path)]) == 2
    assert "no cells under" in capsys.readouterr().err
    assert report_cli.main([str(tmp_path / "absent")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_table1_shows_the_papers_metrics_beside_the_papers_numbers_and_keeps_the_others_in_the_csv(tmp_path):
    grid = tmp_path / "grid"
    cells = {  # (task, model, method) -> metrics as stored, for seeds 1 and 2 (second = first + 0.01 / + 1)
        ("mrpc", "bert", "cross_entropy"): {"accuracy": 0.85, "f1": 0.89, "combined_score": 0.87,
                                            "embedding_i1": 0.5, "cls_isoscore": 0.01, "collapsed": False},
        ("mrpc", "bert", "istar"): {"accuracy": 0.84, "f1": 0.90, "combined_score": 0.87},
        ("squad", "distilbert", "istar"): {"f1": 83.0, "exact_match": 74.0},
        ("stsb", "minilm", "cross_entropy"): {"pearson": 0.80, "spearman": 0.79, "combined_score": 0.795},
    }
    for (task, model, method), metrics in cells.items():
        for seed in (1, 2):
            cell = grid / f"{task}_{model}_{method}_{seed}"
            lam, zeta = (-1.0, 0.2) if method == "istar" else (None, None)
            write_cell(cell, task, model, method, lam, zeta, seed, 0.0, 0.1)
            results = json.loads((cell / "results.json").read_text())
            step = 1.0 if task == "squad" else 0.01
            stored = {name: value + (seed - 1) * step for name, value in metrics.items()}
            results.update(main_metric="f1" if task == "squad" else "combined_score", metrics=stored)
            (cell / "results.json").write_text(json.dumps(results))
    records, problems = istar_cells.collect(grid)
    assert problems == [] and {r.metric for r in records} == {"accuracy", "f1", "pearson"}
    markdown = report.table1_markdown(report.table1(records))
    assert ("| bert | mrpc | accuracy | **85.50 ± 0.71 · paper 86.51 ± 0.21 (-1.01)** | "
            "84.50 ± 0.71 (λ -1, ζ 0.2) · paper 86.76 ± 0.57 (-2.26) |") in markdown
    assert "| distilbert | squad | f1 | — | 83.50 ± 0.71 (λ -1, ζ 0.2) · paper 83.69 ± 0.36 (-0.19) |" in markdown
    assert ("| distilbert | squad | exact_match | — | 74.50 ± 0.71 (λ -1, ζ 0.2) · paper 74.80 ± 0.27 (-0.30) |"
            in markdown)
    assert "| minilm | stsb | pearson | 80.50 ± 0.71 | — |" in markdown  # no paper cell for MiniLM
    assert "combined_score" not in markdown and "spearman" not in markdown
    rows = {(row["model"], row["task"], row["metric"]): row for row in report.table1_csv_rows(report.table1(records))}
    # the final evaluation's geometry measures and its collapsed flag are no task metrics (nor percentages)
    assert sorted(rows) == [("bert", "mrpc", "accuracy"), ("bert", "mrpc", "combined_score"), ("bert", "mrpc", "f1"),
                            ("distilbert", "squad", "exact_match"), ("distilbert", "squad", "f1"),
                            ("minilm", "stsb", "combined_score"), ("minilm", "stsb", "pearson"),
                            ("minilm", "stsb", "spearman")]
    mrpc_f1 = rows["bert", "mrpc", "f1"]
    assert mrpc_f1["reported"] is False and mrpc_f1["I-STAR mean"] == pytest.approx(90.5)
    assert mrpc_f1["I-STAR paper mean"] is None  # the paper reports MRPC in accuracy only
    accuracy = rows["bert", "mrpc", "accuracy"]
    assert accuracy["reported"] is True and accuracy["Base difference"] == pytest.approx(85.5 - 86.51)
    assert (accuracy["I-STAR paper mean"], accuracy["I-STAR paper std"]) == (86.76, 0.57)


def _ablation_grid(root):
    """Figure 7 cells (RTE, bert, lam -1, six zetas) and Figure 8 cells (CoLA, bert, layers 1-3, global, Base),
    two seeds each scoring mean -/+ 1; the criterion's layers as the trainer writes them."""
    def cell(name, task, method, lam, zeta, layers, mean):
        for seed, sign in ((1, -1), (2, 1)):
            directory = root / f"{name},seed={seed}"
            write_cell(directory, task, "bert", method, lam, zeta, seed, mean + sign, 0.1)
            results = json.loads((directory / "results.json").read_text())
            if method == "istar":
                results["criterion"]["layers"] = layers
            if task == "cola":
                value = (mean + sign) / 100
                results.update(main_metric="matthews_correlation", metrics={"matthews_correlation": value})
            (directory / "results.json").write_text(json.dumps(results))
            (directory / "config.yaml").write_text(f"task: {task}\nseed: {seed}\ncriterion: {{layers: {layers}}}\n"
                                                   .replace("None", "null"))

    for zeta in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        cell(f"rte,zeta={zeta}", "rte", "istar", -1.0, zeta, None, 60.0 + 10 * zeta * (1 - zeta))  # peak at 0.4/0.6
    for layer in (1, 2, 3):
        cell(f"cola,layers={layer}", "cola", "istar", -1.0, 0.8, [layer], 50.0 + layer)
    cell("cola,global", "cola", "istar", -1.0, 0.8, None, 55.0)
    cell("cola,base", "cola", "cross_entropy", None, None, None, 52.0)


def test_figures_7_and_8_are_drawn_when_the_grid_holds_their_cells(tmp_path, capsys):
    from istar_plugin.reports.outputs import istar_figures as ablations

    _ablation_grid(tmp_path / "grid")
    records, problems = istar_cells.collect(tmp_path / "grid")
    assert problems == [] and len(records) == 2 * (6 + 5)
    zetas = ablations.figure7_points(records)
    assert list(zetas) == ["rte"] and list(zetas["rte"]) == [("bert", -1.0)]
    line = zetas["rte"]["bert", -1.0]
    assert [z for z, _ in line] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert [s.mean for _, s in line] == pytest.approx([60.0, 61.6, 62.4, 62.4, 61.6, 60.0])
    assert all(s.std == pytest.approx(2 ** 0.5) for _, s in line)
    panels = ablations.figure8_points(records)
    assert list(panels) == [("cola", "bert")]
    panel = panels["cola", "bert"]
    assert [(layer, s.mean) for layer, s in panel["layers"]] == [(1, pytest.approx(51.0)), (2, pytest.approx(52.0)),
                                                                 (3, pytest.approx(53.0))]
    assert (panel["global"].mean, panel["global"].variant) == (pytest.approx(55.0), "criterion.layers=None")
    assert panel["base"].mean == pytest.approx(52.0) and panel["base"].method == "cross_entropy"
    out = tmp_path / "report"
    assert report_cli.main([str(tmp_path / "grid"), "--out", str(out)]) == 0
    for name in ("figure7.png", "figure8.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_figures_mark_a_setting_with_collapsed_seeds_and_one_with_fewer_seeds_beside_its_point(tmp_path, monkeypatch):
    """As Table 1 marks their scores, Figures 3, 7 and 8 cross the point of a setting whose seeds predicted one class
    (the cross explained in the legend) and write "K collapsed" beside it, and "n=K" beside a point over fewer seeds
    than the others of its panel."""
    import matplotlib.pyplot as plt

    drawn = []
    monkeypatch.setattr(istar_figures, "save_png", lambda fig, path: drawn.append(fig) or path)

    def run(method, lam, zeta, seed, score, collapsed=False, layers=None):
        return istar_cells.Record("rte", "bert", method, lam, zeta, seed, "accuracy", score / 100, score,
                                  0.2 + 0.03 * (lam or 0.0), str(tmp_path / f"{method}{lam}{zeta}{layers}{seed}"),
                                  variant="" if layers is None else f"criterion.layers=[{layers[0]}]",
                                  collapsed=collapsed, layers=layers)

    base = [run("cross_entropy", None, None, seed, 60.0 + seed) for seed in SEEDS]
    collapsing = [run("istar", -1.0, 0.2, seed, 70.0 + seed, collapsed=seed < 3) for seed in SEEDS]  # best at -1
    records = base + collapsing + [run("istar", -1.0, 0.4, seed, 65.0 + seed) for seed in SEEDS]
    records += [run("istar", -1.0, 0.6, seed, 64.0 + seed) for seed in (1, 2)]  # seed 3 failed
    records += [run("istar", 1.0, 0.2, seed, 50.0 + seed) for seed in (1, 2)]  # seed 3 failed

    def texts(ax):
        return [text.get_text() for text in ax.texts]

    def crosses(ax):
        return [tuple(xy) for line in ax.lines if line.get_marker() == "x" for xy in line.get_xydata().tolist()]

    istar_figures.figure3(records, tmp_path / "figure3.png")
    fig = drawn.pop()
    ax, ax_delta = fig.axes[:2]
    assert texts(ax) == ["-1 (2 collapsed)", "0", "1 (n=2)"] and texts(ax_delta) == ["(2 collapsed)", "(n=2)"]
    assert crosses(ax) == [(pytest.approx(0.17), pytest.approx(72.0))]
    assert crosses(ax_delta) == [(-1.0, pytest.approx(10.0))]  # 72 - 62, paired by seed
    assert [text.get_text() for text in fig.legends[0].get_texts()] == ["bert", istar_figures.COLLAPSED]
    plt.close(fig)

    istar_figures.figure7(records, tmp_path / "figure7.png")
    fig = drawn.pop()
    assert texts(fig.axes[0]) == ["(2 collapsed)", "(n=2)"]
    assert crosses(fig.axes[0]) == [(0.2, pytest.approx(72.0))]
    assert {text.get_text() for text in fig.axes[0].get_legend().get_texts()} == {"bert λ=-1", istar_figures.COLLAPSED}
    plt.close(fig)

    layered = [run("istar", -1.0, 0.2, seed, 55.0 + seed, collapsed=seed == 1, layers=(1,)) for seed in SEEDS]
    layered += [run("istar", -1.0, 0.2, seed, 57.0 + seed, layers=(2,)) for seed in (1, 2)]  # seed 3 failed
    istar_figures.figure8(base + collapsing + layered, tmp_path / "figure8.png")
    fig = drawn.pop()
    assert texts(fig.axes[0]) == ["(1 collapsed)", "(n=2)"]
    assert crosses(fig.axes[0]) == [(1.0, pytest.approx(57.0))]
    assert {text.get_text() for text in fig.axes[0].get_legend().get_texts()} == {
        "I-STAR on one layer", istar_figures.COLLAPSED, "I-STAR, all layers (2 collapsed)", "Base"}
    plt.close(fig)

    healthy = base + [replace(record, collapsed=False) for record in collapsing]
    healthy += [run("istar", 1.0, 0.2, seed, 50.0 + seed) for seed in SEEDS]
    istar_figures.figure3(healthy, tmp_path / "figure3.png")
    fig = drawn.pop()
    assert texts(fig.axes[0]) == ["-1", "0", "1"] and texts(fig.axes[1]) == [] and crosses(fig.axes[0]) == []
    assert [text.get_text() for text in fig.legends[0].get_texts()] == ["bert"]
    plt.close(fig)


def test_figures_7_and_8_need_a_zeta_sweep_and_single_layer_cells(collected):
    from istar_plugin.reports.outputs import istar_figures as ablations

    records = collected[0]  # two zetas at most per lambda, no layers: neither figure
    assert ablations.figure7_points(records) == {} and ablations.figure8_points(records) == {}
    with pytest.raises(ValueError, match="figure 8 needs I-STAR cells penalising a single layer"):
        ablations.figure8(records, "unused.png")


def test_held_out_selection_picks_by_validation_and_is_labelled(tmp_path, capsys):
    """lam -1 wins on the evaluation split, lam -5 on the validation split held out of training: Table 1 keeps the
    paper's (optimistic) choice, table1_heldout the validation's, each saying how it chose."""
    grid = tmp_path / "grid"
    for lam, eval_score, valid_score in [(None, 0.80, 0.70), (-1.0, 0.85, 0.70), (-5.0, 0.83, 0.75)]:
        for seed in SEEDS:
            cell = grid / f"lam{lam}" / f"seed{seed}"
            method, zeta = ("cross_entropy", None) if lam is None else ("istar", 0.2)
            write_cell(cell, "sst2", "bert", method, lam, zeta, seed, 100 * eval_score, 0.2)
            results = json.loads((cell / "results.json").read_text())
            results["validation"] = {"metric": "accuracy", "best": valid_score, "examples": 100, "best_step": 10,
                                     "stopped_early": False, "patience": None, "history": []}
            (cell / "results.json").write_text(json.dumps(results))
            (cell / "metrics.jsonl").write_text('{"time": 100.0}\n{"time": %.1f}\n' % (100 + 540 + 30 * seed))
    out = tmp_path / "report"
    assert report_cli.main([str(grid), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    optimistic, held_out = (out / "table1.md").read_text(), (out / "table1_heldout.md").read_text()
    assert ("evaluation split, as the paper selects, among its settings with the most seeds: the score is "
            "optimistic") in optimistic
    assert "**85.00 ± 0.00" in optimistic
    assert "validation split held out of the training set" in held_out and "**83.00 ± 0.00" in held_out
    assert held_out in printed
    # 570, 600, 630 s x 2
    assert "| bert | sst2 | I-STAR | — | 6 | 10.0 | 9.5-10.5 |" in (out / "wall_times.md").read_text()
    with open(out / "table1_heldout.csv") as handle:
        assert next(csv.DictReader(handle))["I-STAR lam"] == "-5.0"


def test_paper_model_sets_the_papers_numbers_beside_a_model_it_did_not_run(tmp_path, capsys):
    grid = tmp_path / "grid"
    for seed in SEEDS:
        write_cell(grid / f"base{seed}", "rte", "minilm", "cross_entropy", None, None, seed, 60.0 + seed, 0.2)
    assert report_cli.main([str(grid), "--out", str(tmp_path / "plain")]) == 0
    assert "| minilm | rte | accuracy | 62.00 ± 1.00 |" in capsys.readouterr().out  # no paper MiniLM: nothing beside
    assert report_cli.main([str(grid), "--out", str(tmp_path / "beside"), "--paper-model", "bert"]) == 0
    assert "| minilm | rte | accuracy | 62.00 ± 1.00 · paper bert 62.24 ± 0.48 (-0.24) |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        report_cli.main([str(grid), "--paper-model", "gpt2"])
    assert refused.value.code == 2
    assert "invalid choice: 'gpt2' (choose from 'albert', 'bert', 'distilbert')" in capsys.readouterr().err
    assert not (grid / "report").exists()  # refused before writing anything


def test_an_out_folder_of_user_files_is_refused_and_a_report_folder_is_rewritten(grid, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "table1.md").write_text("my own table")
    assert report_cli.main([str(grid), "--out", str(mine)]) == 4
    assert capsys.readouterr().err.strip().startswith(f"istar-report: error: --out {mine}: exists and holds files "
                                                      "istar_plugin did not write (table1.md)")
    assert [p.name for p in mine.iterdir()] == ["table1.md"] and (mine / "table1.md").read_text() == "my own table"
    ours = tmp_path / "ours"
    assert report_cli.main([str(grid), "--out", str(ours)]) == 0
    assert report_cli.main([str(grid), "--out", str(ours)]) == 0
    assert (ours / ".istar-report").is_file()


def test_reference_compares_each_value_of_a_swept_key_with_the_reference_per_method(tmp_path, capsys):
    grid = tmp_path / "grid"
    # bf16 moves I-STAR's score by +2 on every seed and Base's by nothing; seeds spread fp32 by 1 point
    for precision, shift in (("fp32", 0.0), ("bf16", 2.0)):
        for seed, sign in zip(SEEDS, (-1, 0, 1)):
            for method, lam, zeta, bonus in (("istar", -1.0, 0.2, shift), ("cross_entropy", None, None, 0.0)):
                cell = grid / f"{method}_{precision}_seed{seed}"
                write_cell(cell, "sst2", "bert", method, lam, zeta, seed, 90.0 + bonus + sign, 0.1 + bonus / 100)
                (cell / "config.yaml").write_text(f"task: sst2\nseed: {seed}\nprecision: {precision}\n")
    assert report_cli.main([str(grid), "--reference", "precision=fp32", "--out", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "versus_reference.csv") as handle:
        rows = {row["method"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"Base", "I-STAR"}
    assert rows["Base"]["variant"] == "precision=bf16" and float(rows["Base"]["difference"]) == 0.0
    assert rows["Base"]["score_within_spread"] == "True"
    istar = rows["I-STAR"]
    assert float(istar["difference"]) == pytest.approx(2.0) and istar["per_seed"] == "+2.00 +2.00 +2.00"
    assert float(istar["reference_std"]) == pytest.approx(1.0) and istar["score_within_spread"] == "False"
    assert float(istar["isoscore_difference"]) == pytest.approx(0.02) and istar["verdict"] == "better"
    assert "| bert | sst2 | I-STAR | -1 | 0.2 | precision=bf16 | precision=fp32 |" in capsys.readouterr().out
    # a reference that is not KEY=VALUE: one line, before any cell is read; one that matches nothing: said, no file
    assert report_cli.main([str(grid), "--reference", "precision", "--out", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.strip() == ("istar-report: error: --reference 'precision' is not KEY=VALUE "
                                              "(e.g. precision=fp32)")
    assert not (tmp_path / "bad").exists()
    assert report_cli.main([str(grid), "--reference", "seed_order=7", "--out", str(tmp_path / "none")]) == 0
    assert "versus_reference.md not written: no setting has seed_order at another value" in capsys.readouterr().out
    assert not (tmp_path / "none" / "versus_reference.md").exists()


def test_a_boolean_key_is_a_variant_as_the_command_line_writes_it_and_a_reference_by_it(tmp_path):
    grid = tmp_path / "grid"
    for flag, shift in (("false", 0.0), ("true", -1.0)):
        for seed in SEEDS:
            cell = grid / f"base_{flag}_seed{seed}"
            write_cell(cell, "sst2", "bert", "cross_entropy", None, None, seed, 90.0 + seed + shift, 0.1)
            (cell / "config.yaml").write_text(f"task: sst2\nseed: {seed}\nmodel: {{padding_free: {flag}}}\n")
    records, _ = istar_cells.collect(grid)
    assert sorted({record.variant for record in records}) == ["model.padding_free=false", "model.padding_free=true"]
    out = tmp_path / "out"
    assert report_cli.main([str(grid), "--reference", "model.padding_free=false", "--out", str(out)]) == 0
    with open(out / "versus_reference.csv") as handle:
        (row,) = csv.DictReader(handle)
    assert (row["variant"], row["per_seed"]) == ("model.padding_free=true", "-1.00 -1.00 -1.00")
    assert (row["reference_std"], row["score_within_spread"]) == ("1.0", "True")  # |-1| within sd 1
    # one seed: no spread to measure the difference against, said as such rather than as a spread of 0
    one = tmp_path / "one"
    assert report_cli.main([str(grid / "base_false_seed1"), str(grid / "base_true_seed1"), "--reference",
                            "model.padding_free=false", "--out", str(one)]) == 0
    with open(one / "versus_reference.csv") as handle:
        (row,) = csv.DictReader(handle)
    assert (row["reference_std"], row["score_within_spread"], row["isoscore_within_spread"]) == ("", "", "")
    assert "| -1.00 | — | — | +0.0000 | +0.0000 | — | — |" in (one / "versus_reference.md").read_text()


def test_cells_written_before_a_config_key_was_added_are_one_setting_with_the_newer_ones(tmp_path):
    """Seed 1 ran before model.lora existed and with precision=auto (fp32 on its machine); seed 2 with both
    written out: the same setting (no variant), not two settings of one seed each."""
    grid = tmp_path / "grid"
    for seed, extra, precision in ((1, "", "auto"), (2, "model: {lora: {r: 0, alpha: 16.0}}\n", "fp32")):
        cell = grid / f"base{seed}"
        write_cell(cell, "sst2", "bert", "cross_entropy", None, None, seed, 90.0 + seed, 0.1)
        (cell / "config.yaml").write_text(f"task: sst2\nseed: {seed}\nprecision: {precision}\n{extra}")
        results = json.loads((cell / "results.json").read_text())
        (cell / "results.json").write_text(json.dumps({**results, "precision": "fp32"}))
    records, problems = istar_cells.collect(grid)
    assert problems == [] and [record.variant for record in records] == ["", ""]
    assert [s.n for s in istar_settings.settings(records)] == [2]
    bf16 = json.loads((grid / "base1" / "results.json").read_text())
    (grid / "base1" / "results.json").write_text(json.dumps({**bf16, "precision": "bf16"}))  # auto ran bf16 there
    assert sorted(record.variant for record in istar_cells.collect(grid)[0]) == ["precision=bf16", "precision=fp32"]


def test_a_declared_table_without_rows_is_written_only_when_always_and_says_why_not(tmp_path):
    table = Table("scores", rows=lambda grid: grid, markdown=lambda grid, rows: "| x |\n", columns=("task", "mean"),
                  shown="", absent=lambda grid: "scores.md not written: no cell finished")
    assert write_table(table, [], tmp_path) == "scores.md not written: no cell finished"
    assert list(tmp_path.iterdir()) == []
    assert write_table(replace(table, always=True, shown=None), [], tmp_path) is None  # written, not printed
    assert (tmp_path / "scores.md").read_text() == "| x |\n" and (tmp_path / "scores.csv").read_text() == "task,mean\n"


def test_every_file_the_report_writes_is_declared_once(grid, tmp_path):
    names = [f"{table.name}.{ext}" for table in TABLES
             for ext, written in (("md", table.markdown), ("csv", table.csv_rows)) if written is not None]
    names += [figure.name for figure in FIGURES]
    assert len(names) == len(set(names))
    write_report(istar_cells.collect(grid)[0], tmp_path / "report")
    assert {path.name for path in (tmp_path / "report").iterdir()} <= set(names)


def test_one_seeds_std_is_undefined_in_every_table():
    """One seed has no spread: every table shows its std as undefined (before, some showed 0.00 and others nothing)."""
    from istar_plugin.reports.outputs import calibration_tables, isolayer_table3
    from istar_plugin.storage.seeds import over_seeds
    record = istar_cells.Record("sst2", "bert", "istar", -1.0, 0.2, 1, "accuracy", 0.9, 90.0, 0.1, "/g/1")
    (setting,) = istar_settings.settings([record])
    assert setting.std is None and setting.isoscore_std is None
    assert istar_settings.metric_summary(setting, "accuracy") == over_seeds([90.0])
    assert report.format_score(setting, 1).startswith("90.00 ± — (λ -1, ζ 0.2, n=1) · paper 92.65 ± 0.18")
    assert "| 90.00 ± — | 2 |" in report.table2_markdown(report.table2([record, replace(record, lam=-3.0, score=80.0)]))
    run = calibration_tables.Run("bert", "mrpc", "Base", 1, 81.0, False, None, None, None)
    assert calibration_tables.score_cell([run], None) == "81.00 ± —"
    assert isolayer_table3._median_std([61.0]) == "61.0 (—)"


def test_a_setting_left_with_fewer_seeds_is_not_figure_3s_point_nor_the_base_of_another_variant(collected):
    """A seed that failed leaves its setting a mean of the others: like Table 1, Figure 3 and the Base a setting of
    another variant is compared with pick among the settings with the most seeds."""
    records = [r for r in collected[0] if not (r.model == "bert" and r.task == "sst2" and r.method == "istar"
                                               and r.lam == -5.0 and r.zeta == 0.6 and r.seed == 1)]
    # zeta 0.6 over seeds 2-3 (94.0) beats zeta 0.2 over seeds 1-3 (93.5) by mean, but has one seed fewer
    (lam, best), *_ = istar_figures.figure3_points(records)["sst2"]["bert"]
    assert (lam, best.zeta, best.n, best.mean) == (-5.0, 0.2, 3, pytest.approx(93.5))
    from istar_plugin.reports.comparisons import versus_base

    def run(variant, method, seed, score):
        return istar_cells.Record("rte", "bert", method, None if method == "cross_entropy" else -1.0,
                                  None if method == "cross_entropy" else 0.2, seed, "accuracy", score / 100, score,
                                  0.1, f"/g/{variant}{method}{seed}", variant=variant)

    grid = [run("optim.lr=1e-05", "cross_entropy", seed, 60.0 + seed) for seed in SEEDS]
    grid += [run("optim.lr=3e-05", "cross_entropy", seed, 70.0 + seed) for seed in (1, 2)]  # seed 3 failed
    grid += [run("optim.lr=5e-05", "istar", seed, 65.0 + seed) for seed in SEEDS]  # no Base of its own
    (row,) = versus_base.comparisons(grid)
    assert (row["base_variant"], row["seeds"], row["difference"]) == ("optim.lr=1e-05", 3, pytest.approx(5.0))


def test_a_difference_to_base_over_fewer_seeds_than_its_mean_says_so_in_table_1(collected, tmp_path):
    """Base's seed 3 failed: CosReg's and I-STAR's means are over seeds 1-3, their differences to Base over 1-2."""
    records = [r for r in collected[0] if not (r.model == "bert" and r.task == "sst2" and r.method == "cross_entropy"
                                               and r.seed == 3)]
    write_report(records, tmp_path / "report")
    table = (tmp_path / "report" / "table1.md").read_text()
    # CosReg 91.3, 92.3 and I-STAR 91.5, 93.5 against Base 91.5, 92.0
    assert ("| bert | sst2 | accuracy | 91.75 ± 0.35 (n=2) · paper 92.40 ± 0.41 (-0.65) | "
            "92.30 ± 1.00 (λ +1) · paper 92.01 ± 0.23 (+0.29) · Δ +0.05 [-0.20, +0.30] n.d. (2 of 3 seeds) | "
            "93.50 ± 2.00 (λ -5, ζ 0.2) · paper 92.65 ± 0.18 (+0.85) · Δ +0.75 [+0.00, +1.50] n.d. (2 of 3 seeds) |"
            ) in table
    assert table.count(" seeds) |") == 2  # the other rows' differences are over every seed of their means


def test_a_collapsed_setting_is_marked_in_every_table_that_shows_its_score_or_difference(tmp_path, capsys):
    """A setting whose runs predicted one class is marked ``(K collapsed)`` wherever its score or its difference to
    another setting is shown, as Table 1 marks it; the CSVs keep their columns and values."""
    _ablation_grid(tmp_path / "grid")
    options = ["--reference", "criterion.layers=[1]"]
    assert report_cli.main([str(tmp_path / "grid"), "--out", str(tmp_path / "plain"), *options]) == 0
    for seed in (1, 2):  # CoLA's all-layer I-STAR setting: Table 1's and Table 2's I-STAR
        path = tmp_path / "grid" / f"cola,global,seed={seed}" / "results.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "collapsed": True}))
    out = tmp_path / "collapsed"
    assert report_cli.main([str(tmp_path / "grid"), "--out", str(out), *options]) == 0
    read = lambda name: (out / name).read_text()  # noqa: E731
    assert "| **55.00 ± 1.41 (λ -1, ζ 0.8) (2 collapsed) · paper 59.60" in read("table1.md")
    assert "| bert | cola | I-STAR | -1 | 0.8 | criterion.layers=None | 55.00 ± 1.41 (2 collapsed) | 4 |" in read(
        "table2.md")
    assert "| criterion.layers=None | 2 | +3.00 (2 collapsed) | 0.00 | better |" in read("power.md")
    assert "| criterion.layers=None | 1 | 2 | 55.00 (2 collapsed) | 0.1 |" in read("penalised_layers.md")
    assert ("| criterion.layers=None | criterion.layers=[1] | matthews_correlation | 2 | +4.00 (2 collapsed) |"
            in read("versus_reference.md"))
    assert all(read(name).count("collapsed)") == 1 for name in ("table1.md", "table2.md", "power.md",
                                                                 "penalised_layers.md", "versus_reference.md"))
    for name in ("table2.csv", "power.csv", "penalised_layers.csv", "versus_reference.csv"):
        assert read(name) == (tmp_path / "plain" / name).read_text(), name
