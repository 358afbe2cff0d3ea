"""The paper's results in the package: its Table 1 carried complete and with the same numbers as the project's paper
notes, and its Figure 2 experiment run end to end at small sizes (the CSV's shape, the paper's finding that shrinkage
recovers isotropy from small batches, a real PNG)."""
import csv

import pytest

from istar_plugin.reports.outputs import istar_figure2 as figure2
from istar_plugin.reports.paper.istar import PAPER_METRICS, paper_result, paper_table1

POPULATION = 0.8673  # IsoScore of diag(10, 6, 4, 4, 1, ..., 1) in 768 dimensions


def test_the_packaged_table_has_every_cell_of_the_paper():
    table = paper_table1()
    assert len(table) == 3 * 3 * (len(PAPER_METRICS) + 1)  # models x methods x (9 tasks, SQuAD with two metrics)
    for (_, _, task, metric), (mean, std) in table.items():
        assert metric in PAPER_METRICS[task] and 0 < mean < 100 and 0 <= std < 5
    assert paper_result("albert", "cross_entropy", "cola", "matthews_correlation") == (54.56, 0.93)
    assert paper_result("distilbert", "cosreg", "squad", "exact_match") == (74.40, 0.24)
    assert paper_result("roberta", "istar", "sst2", "accuracy") is None


def test_the_packaged_table_matches_the_shared_paper_notes(shared_data):
    path = shared_data.parent / "paper" / "table1.csv"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    with open(path) as handle:
        notes = {(r["model"], r["method"], r["task"], r["metric"]): (float(r["mean"]), float(r["std"]))
                 for r in csv.DictReader(handle)}
    assert paper_table1() == notes


def test_figure2_small_run_shows_shrinkage_recovers_isotropy(tmp_path, capsys):
    sizes = (400, 3000)
    figure2.main(["--out", str(tmp_path), "--seed", "1", "--repeats", "2"], sizes=sizes, shrink_points=20_000)
    with open(tmp_path / "figure2.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["zeta", "n_points", "mean", "std"]
    assert len(rows) == len(figure2.ZETAS) * len(sizes)
    mean = {(float(row["zeta"]), int(row["n_points"])): float(row["mean"]) for row in rows}
    assert mean[0.0, 400] < 0.5 * POPULATION  # no shrinkage: a small batch badly underestimates
    assert mean[0.8, 400] == pytest.approx(POPULATION, abs=0.1)
    assert all(mean[0.0, n] < mean[0.4, n] < mean[0.8, n] for n in sizes)
    assert mean[0.0, 400] < mean[0.0, 3000]
    assert (tmp_path / "figure2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp"))  # temporary files were renamed into place
    assert f"{POPULATION:.4f}" in capsys.readouterr().out
