"""The paper's Table 1 carried in the package: complete, and the same numbers as the project's paper notes."""
import csv

import pytest

from istar_plugin.reports.paper.istar import PAPER_METRICS, paper_result, paper_table1


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
