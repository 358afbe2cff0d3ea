"""The Figure 2 experiment end to end at small sizes: CSV shape, the paper's finding, a real PNG."""
import csv

import pytest

from istar_plugin.reports.outputs import istar_figure2 as figure2

POPULATION = 0.8673  # IsoScore of diag(10, 6, 4, 4, 1, ..., 1) in 768 dimensions


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
