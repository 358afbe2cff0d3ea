"""istar-report's curves.md/.csv: each setting's evaluations over training steps, from its cells' metrics logs.

The synthetic cells are written as the trainer leaves them (config.yaml, results.json, attempts.jsonl, a 300-step
metrics.jsonl whose evaluations are at ``steps``), as tests/test_grid_archive.py's grid is.
"""
import json
import shutil

from istar_plugin.cli import report as report_cli
from istar_plugin.reports import docs_tables
from istar_plugin.storage.results import ResultsRecord, write_results

CRITERIA = {"cross_entropy": {"name": "cross_entropy"}, "istar": {"name": "istar", "lam": -1.0, "zeta": 0.2}}
STEPS = (0, 150, 300)
ACCURACY = {("cross_entropy", 1): (0.5, 0.625, 0.75), ("cross_entropy", 2): (0.5, 0.75, 0.875),
            ("istar", 1): (0.5, 0.5, 0.625)}
"""(method, seed) -> its accuracy at each of STEPS: multiples of 1/8, so the means are exact in binary."""
ISOSCORE = {("cross_entropy", 1): (0.25, 0.125, 0.125), ("cross_entropy", 2): (0.25, 0.25, 0.375),
            ("istar", 1): (0.25, 0.0625, 0.03125)}
I1 = {("cross_entropy", 1): (0.75, 0.75, 0.75), ("cross_entropy", 2): (0.75, 0.875, 0.875),
      ("istar", 1): (0.75, 0.8125, 0.875)}


def write_cell(cell, method, seed, steps=STEPS, i1=True):
    """A finished RTE cell that evaluated at ``steps`` (the last of them its end, step 300), with I1 logged unless
    not ``i1``."""
    accuracy, isoscore, embedding_i1 = (values[method, seed][-len(steps):] for values in (ACCURACY, ISOSCORE, I1))
    cell.mkdir(parents=True)
    (cell / "config.yaml").write_text(f"task: rte\nseed: {seed}\ncriterion:\n  name: {method}\noutput_dir: {cell}\n")
    write_results(cell / "results.json", ResultsRecord(
        "finished", "rte", "minilm", CRITERIA[method], seed, step=300, epoch=3, metrics={"accuracy": accuracy[-1]},
        main_metric="accuracy", eval_isoscore_star=isoscore[-1]))
    (cell / "attempts.jsonl").write_text(
        json.dumps({"event": "start", "host": "machine-a", "time": 1000.0}) + "\n"
        + json.dumps({"event": "finished", "host": "machine-a", "time": 1060.0}) + "\n")
    log = [{"step": step, "time": 1000.0 + step / 10, "train/loss": 1 / step} for step in range(1, 301)]
    for step, values in zip(steps, zip(accuracy, isoscore, embedding_i1)):
        evaluation = dict(zip(("eval/accuracy", "eval/isoscore_star", "eval/embedding_i1"), values))
        if not i1:
            del evaluation["eval/embedding_i1"]
        log.append({"step": step, "time": 1000.0 + step / 10, **evaluation})
    (cell / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n"
                                                for record in sorted(log, key=lambda r: r["step"])))


def make_grid(root, **options):
    for method, seed in ACCURACY:
        write_cell(root / f"criterion={method},seed={seed}", method, seed, **options)
    return root


def report(capsys, *arguments):
    code = report_cli.main([str(argument) for argument in arguments])
    capsys.readouterr()
    return code


def test_curves_give_each_evaluated_step_the_seeds_mean_and_std(tmp_path, capsys):
    assert report(capsys, make_grid(tmp_path / "grid"), "--out", tmp_path / "out") == 0
    text = (tmp_path / "out" / "curves.md").read_text()
    caption, table = text.split("\n\n")
    assert caption == ("Evaluations over training steps of every setting evaluated at two or more steps: at each "
                       "step, the seeds evaluated there and their mean ± std (— for one seed) of the task "
                       "score, of eval IsoScore* and, where the cells log it, of the word-embedding matrix's I1.")
    assert table.splitlines() == [
        "| Model | Task | Method | λ | ζ | other | metric | step | seeds | score | eval IsoScore* | I1 (embeddings) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| minilm | rte | Base | — | — | — | accuracy | 0 | 2 | 50.00 ± 0.00 | 0.250 ± 0.000 | 0.750 ± 0.000 |",
        "| minilm | rte | Base | — | — | — | accuracy | 150 | 2 | 68.75 ± 8.84 | 0.188 ± 0.088 | 0.812 ± 0.088 |",
        "| minilm | rte | Base | — | — | — | accuracy | 300 | 2 | 81.25 ± 8.84 | 0.250 ± 0.177 | 0.812 ± 0.088 |",
        "| minilm | rte | I-STAR | -1 | 0.2 | — | accuracy | 0 | 1 | 50.00 ± — | 0.250 ± — | 0.750 ± — |",
        "| minilm | rte | I-STAR | -1 | 0.2 | — | accuracy | 150 | 1 | 50.00 ± — | 0.062 ± — | 0.812 ± — |",
        "| minilm | rte | I-STAR | -1 | 0.2 | — | accuracy | 300 | 1 | 62.50 ± — | 0.031 ± — | 0.875 ± — |"]
    assert (tmp_path / "out" / "curves.csv").read_text().splitlines() == [
        "model,task,method,lam,zeta,variant,metric,step,seeds,score,score_std,isoscore_star,isoscore_star_std,"
        "embedding_i1,embedding_i1_std",
        "minilm,rte,Base,,,,accuracy,0,2,50.0,0.0,0.25,0.0,0.75,0.0",
        "minilm,rte,Base,,,,accuracy,150,2,68.75,8.8388347648,0.1875,0.0883883476,0.8125,0.0883883476",
        "minilm,rte,Base,,,,accuracy,300,2,81.25,8.8388347648,0.25,0.1767766953,0.8125,0.0883883476",
        "minilm,rte,I-STAR,-1.0,0.2,,accuracy,0,1,50.0,,0.25,,0.75,",
        "minilm,rte,I-STAR,-1.0,0.2,,accuracy,150,1,50.0,,0.0625,,0.8125,",
        "minilm,rte,I-STAR,-1.0,0.2,,accuracy,300,1,62.5,,0.03125,,0.875,"]


def test_a_seed_evaluated_at_fewer_steps_counts_where_it_was_evaluated(tmp_path, capsys):
    grid = make_grid(tmp_path / "grid")
    shutil.rmtree(grid / "criterion=cross_entropy,seed=2")
    write_cell(grid / "criterion=cross_entropy,seed=2", "cross_entropy", 2, steps=(300,))
    assert report(capsys, grid, "--out", tmp_path / "out") == 0
    base = [line for line in (tmp_path / "out" / "curves.md").read_text().splitlines() if "| Base |" in line]
    assert base == [
        "| minilm | rte | Base | — | — | — | accuracy | 0 | 1 | 50.00 ± — | 0.250 ± — | 0.750 ± — |",
        "| minilm | rte | Base | — | — | — | accuracy | 150 | 1 | 62.50 ± — | 0.125 ± — | 0.750 ± — |",
        "| minilm | rte | Base | — | — | — | accuracy | 300 | 2 | 81.25 ± 8.84 | 0.250 ± 0.177 | 0.812 ± 0.088 |"]


def test_the_i1_column_is_shown_only_when_some_cell_logs_it(tmp_path, capsys):
    assert report(capsys, make_grid(tmp_path / "grid", i1=False), "--out", tmp_path / "out") == 0
    lines = (tmp_path / "out" / "curves.md").read_text().splitlines()
    assert lines[2] == "| Model | Task | Method | λ | ζ | other | metric | step | seeds | score | eval IsoScore* |"
    assert lines[-1] == "| minilm | rte | I-STAR | -1 | 0.2 | — | accuracy | 300 | 1 | 62.50 ± — | 0.031 ± — |"
    assert (tmp_path / "out" / "curves.csv").read_text().splitlines()[-1] == (
        "minilm,rte,I-STAR,-1.0,0.2,,accuracy,300,1,62.5,,0.03125,,,")


def test_a_grid_evaluated_only_at_its_end_writes_no_curves(tmp_path, capsys):
    assert report(capsys, make_grid(tmp_path / "grid", steps=(300,)), "--out", tmp_path / "out") == 0
    assert (tmp_path / "out" / "table1.md").is_file()
    assert not (tmp_path / "out" / "curves.md").exists() and not (tmp_path / "out" / "curves.csv").exists()


def test_an_archive_gives_the_curves_of_its_grid_and_a_docs_marker_renders_them(tmp_path, capsys):
    grid = make_grid(tmp_path / "grid")
    assert report(capsys, grid, "--archive", tmp_path / "docs" / "evidence" / "rte") == 0
    archived_log = (tmp_path / "docs" / "evidence" / "rte" / "criterion=istar,seed=1" / "metrics.jsonl").read_text()
    assert len(archived_log.splitlines()) < 303  # the training records were cut, the evaluations kept
    assert report(capsys, grid, "--out", tmp_path / "live") == 0
    assert report(capsys, tmp_path / "docs" / "evidence" / "rte", "--out", tmp_path / "archived") == 0
    for name in ("curves.md", "curves.csv"):
        assert (tmp_path / "archived" / name).read_text() == (tmp_path / "live" / name).read_text()
    page = tmp_path / "docs" / "page.md"
    page.write_text("<!-- table: evidence/rte curves.md -->\n<!-- end table -->\n")
    assert docs_tables.main([str(page)]) == 0
    table = (tmp_path / "live" / "curves.md").read_text()
    assert page.read_text() == f"<!-- table: evidence/rte curves.md -->\n{table}<!-- end table -->\n"
