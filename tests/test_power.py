"""What a grid's paired comparisons could detect (reports.comparisons.versus_base): the seeds needed to decide
an effect scale as the square of half-width over effect, and istar-report writes the table beside versus_base."""
import csv
import json
import math

from hypothesis import given
from hypothesis import strategies as st

from istar_plugin.cli import report as report_cli
from istar_plugin.reports.comparisons.versus_base import paper_gains, seeds_to_decide

widths = st.floats(0.01, 50.0)
effects = st.floats(0.01, 20.0)
counts = st.integers(2, 50)


@given(widths, counts, effects, st.floats(1.01, 10.0))
def test_a_larger_effect_needs_no_more_seeds_and_a_wider_interval_no_fewer(width, seeds, effect, factor):
    needed = seeds_to_decide(width, seeds, effect)
    assert seeds_to_decide(width, seeds, effect * factor) <= needed <= seeds_to_decide(width * factor, seeds, effect)
    assert seeds_to_decide(width, seeds, -effect) == needed  # a loss is decided as a gain is


@given(widths, counts, effects)
def test_at_the_planned_seeds_the_half_width_has_shrunk_enough_to_decide_the_effect(width, seeds, effect):
    planned = seeds_to_decide(width, seeds, effect)
    shrunk = width * math.sqrt(seeds / planned)  # the half-width falls as 1/sqrt(seeds)
    assert planned == 2 or shrunk <= effect * 1.959964 / (1.959964 + 0.841621) * (1 + 1e-9)
    if planned > 2:  # and one seed fewer would not have done
        assert width * math.sqrt(seeds / (planned - 1)) > effect * 1.959964 / (1.959964 + 0.841621)


def test_nothing_to_decide_no_spread_or_one_seed_plans_no_seeds():
    assert seeds_to_decide(1.0, 5, 0.0) is None and seeds_to_decide(0.0, 5, 1.0) is None
    assert seeds_to_decide(4.5, 1, 0.29) is None  # one seed's interval says nothing of how seeds vary


def test_the_papers_gains_are_its_table1_differences_per_model():
    assert paper_gains("istar", "rte", "accuracy") == [("albert", 1.22), ("bert", 0.29), ("distilbert", 1.23)]
    assert paper_gains("cosreg", "mrpc", "accuracy") == [("albert", -0.05), ("bert", -1.22), ("distilbert", -0.1)]
    assert paper_gains("istar", "stsb", "spearman") == []


def write_cell(root, method, seed, accuracy):
    cell = root / f"{method}{seed}"
    cell.mkdir()
    (cell / "config.yaml").write_text(f"task: rte\nseed: {seed}\n")
    criterion = {"name": method} if method == "cross_entropy" else {"name": method, "lam": -1.0, "zeta": 0.8}
    (cell / "results.json").write_text(json.dumps({
        "task": "rte", "model": "minilm", "seed": seed, "criterion": criterion, "main_metric": "accuracy",
        "accuracy": accuracy, "metrics": {"accuracy": accuracy}, "eval_isoscore_star": 0.2}))


def test_the_report_writes_the_power_table_beside_versus_base(tmp_path, capsys):
    for seed, (base, istar) in enumerate([(0.60, 0.61), (0.62, 0.60), (0.61, 0.63)], start=1):
        write_cell(tmp_path, "cross_entropy", seed, base)
        write_cell(tmp_path, "istar", seed, istar)
    out = tmp_path / "report"
    assert report_cli.main([str(tmp_path), "--out", str(out)]) == 0
    with open(out / "power.csv") as handle:
        rows = list(csv.DictReader(handle))
    # seeds only (no predictions.json): differences +1, -2, +2 points; the interval's half-width over 3 seeds
    assert [row["paper_model"] for row in rows] == ["albert", "bert", "distilbert"]
    width = float(rows[0]["half_width"])
    assert 1.0 < width <= 2.0 and rows[0]["verdict"] == "not distinguishable"
    expected = [math.ceil(3 * (width * (1.959964 + 0.841621) / (1.959964 * gain)) ** 2) for gain in (1.22, 0.29, 1.23)]
    assert [int(row["seeds_to_decide"]) for row in rows] == expected
    assert expected[1] > 100  # the paper's BERT gain on RTE (+0.29) is far below what 3 seeds of MiniLM can see
    printed = capsys.readouterr().out
    assert f"| {width:.2f} | not distinguishable | +1.22 (ALBERT); +0.29 (BERT); +1.23 (DistilBERT) | " \
           f"{expected[0]}; {expected[1]}; {expected[2]} |" in printed


def test_one_pair_of_runs_gives_no_verdict_and_plans_no_seeds(tmp_path):
    write_cell(tmp_path, "cross_entropy", 1, 0.60)
    write_cell(tmp_path, "istar", 1, 0.62)
    out = tmp_path / "report"
    assert report_cli.main([str(tmp_path), "--out", str(out)]) == 0
    with open(out / "power.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["verdict"] for row in rows} == {"undefined (one seed)"}
    assert {row["seeds_to_decide"] for row in rows} == {""}
