"""istar-report on a grid of isotropy-calibration cells: Ding et al.'s Tables 1 and 4, collapse marked."""
import json

import yaml

from istar_plugin.cli import report

CELLS = [  # (model, task, criterion, seed, metrics, collapsed, I1)
    ("bert", "mrpc", {"name": "cross_entropy"}, 1, {"f1": 0.88, "accuracy": 0.84, "combined_score": 0.86}, False, 0.93),
    ("bert", "mrpc", {"name": "cross_entropy"}, 2, {"f1": 0.86, "accuracy": 0.82, "combined_score": 0.84}, False, 0.93),
    ("bert", "mrpc", {"name": "spectrum", "decay": "polynomial"}, 1,
     {"f1": 0.8122, "accuracy": 0.68, "combined_score": 0.75}, True, 0.995),
    ("bert", "mrpc", {"name": "spectrum", "decay": "polynomial"}, 2,
     {"f1": 0.8122, "accuracy": 0.68, "combined_score": 0.75}, True, 0.997),
    ("bert", "mrpc", {"name": "spectrum", "decay": "exponential"}, 1,
     {"f1": 0.83, "accuracy": 0.57, "combined_score": 0.70}, False, 0.99),
    ("minilm", "sst2", {"name": "cosreg", "target": "embeddings", "lam": 1.0}, 1, {"accuracy": 0.80}, False, 0.85),
]


def _grid(tmp_path):
    for model, task, criterion, seed, metrics, collapsed, i1 in CELLS:
        cell = tmp_path / "grid" / f"{model}-{task}-{criterion['name']}-{criterion.get('decay', '')}-{seed}"
        cell.mkdir(parents=True)
        (cell / "config.yaml").write_text(yaml.safe_dump({"task": task, "seed": seed, "criterion": criterion}))
        main = "combined_score" if task == "mrpc" else "accuracy"
        (cell / "results.json").write_text(json.dumps({
            "task": task, "model": model, "seed": seed, "criterion": criterion, "main_metric": main, "metrics": metrics,
            "eval_isoscore_star": 0.2, "collapsed": collapsed, "embedding_i1": i1, "embedding_i2": 0.01}))
    return tmp_path / "grid"


def test_calibration_tables_show_ours_beside_the_paper_and_mark_collapse(tmp_path, capsys):
    out = tmp_path / "report"
    assert report.main([str(_grid(tmp_path)), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    table1 = (out / "calibration_table1.md").read_text()
    assert "Ding et al." in table1
    lines = {tuple(cell.strip() for cell in line.split("|")[1:3]): line
             for line in table1.splitlines() if line.startswith("| ")}
    # MRPC in the paper's metric (F1), with the paper's BERT means beside ours
    assert "| 87.00 ± 1.41 [88.80] |" in lines["bert", "Base"]
    assert "| 81.22 ± 0.00 (2/2 collapsed) [81.22] |" in lines["bert", "Spec-Pol"]
    assert "| 83.00 ± — [81.22] |" in lines["bert", "Spec-Exp"]  # one seed: its std is undefined
    assert "| 80.00 ± — |" in lines["minilm", "CosReg"] and "[" not in lines["minilm", "CosReg"]  # no paper MiniLM
    table4 = (out / "calibration_table4.md").read_text()
    assert ("| bert | Spec-Pol | mrpc | 0.9960 ± 0.0014 | 0.0100 ± 0.0000 | 0.200 ± 0.000 | 2/2 | 0.99-1.00 | "
            "1e-4-0.06 |") in table4
    assert "| minilm | CosReg | sst2 | 0.8500 ± — | 0.0100 ± — | 0.200 ± — | 0/1 | — | — |" in table4
    assert "calibration_table1.md" not in printed and "(2/2 collapsed)" in printed
    # the main Table 1 (the I-STAR paper's metric, MRPC accuracy: polynomial, 68 > 57) marks its collapsed runs too
    main_table = (out / "table1.md").read_text()
    assert "| 68.00 ± 0.00 (2 collapsed) · Δ -15.00 [-16.00, -14.00] worse |" in main_table


def test_no_calibration_tables_without_calibration_cells(tmp_path):
    grid = _grid(tmp_path)
    for cell in grid.iterdir():
        if "spectrum" in cell.name or "cosreg" in cell.name:
            for file in cell.iterdir():
                file.unlink()
            cell.rmdir()
    out = tmp_path / "report"
    assert report.main([str(grid), "--out", str(out)]) == 0
    assert not (out / "calibration_table1.md").exists()
