"""istar-report SEARCH_A SEARCH_B --out DIR: searches of one task compared (what each trained to choose, its choice,
the choice on the evaluation split against its baseline and against the first search's choice, paired by seed), on
search directories built as tests/test_search_report.py builds them (no training), so every number is known."""
import contextlib
import csv
import io

import yaml

from istar_plugin.cli import report as report_cli
from istar_plugin.reports import docs_tables, search_report
from istar_plugin.reports.records import searches
from test_search_report import FINAL, build

# search b chose the same trial (1) and scores it 3 and 4 points above search a's runs of it, seeds 1 and 2
FINAL_B = {"trial1": {1: 0.83, 2: 0.88}, "baseline": FINAL["baseline"]}


def istar_report(*argv):
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = report_cli.main([str(arg) for arg in argv])
    return code, out.getvalue(), err.getvalue()


def test_the_searches_table_shows_a_search_without_a_comparison_as_dashes():
    rows = [{"search": "grid", "sampler": "grid", "pruner": "none", "trials": "24 finished, 0 pruned, 0 failed",
             "steps": 4896, "hours": 1.62, "chosen": "trial 7", "values": "criterion.lam=-1", "held_out": 85.0,
             "seeds": 5, "mean": 84.1, "versus_baseline": None, "versus_first": None}]
    assert search_report.searches_table(rows, "accuracy", "grid").splitlines() == [
        "| search | sampler, pruner | trials | optimizer steps | trial hours | chosen | held-out accuracy | eval mean "
        "(seeds) | Δ vs its baseline | 95% interval | verdict | Δ vs grid's choice | 95% interval | verdict |",
        "|---" * 14 + "|",
        "| grid | grid, none | 24 finished, 0 pruned, 0 failed | 4896 | 1.6 | trial 7: criterion.lam=-1 | 85.00 | "
        "84.10 (5) | — | — | — | — | — | — |"]

def test_two_searches_are_compared_on_what_they_trained_chose_and_scored(tmp_path):
    a, b = build(tmp_path / "a"), build(tmp_path / "b", final=FINAL_B)
    out = tmp_path / "compared"
    code, stdout, stderr = istar_report(a, b, "--out", out)
    assert (code, stderr) == (0, "")
    common = ("(sampler tpe, pruner median; 3 finished, 1 pruned, 1 failed, 1 running): 270 optimizer steps in 0.1 h "
              "of trials; chose trial 1 (criterion.lam=0.25, criterion.zeta=0.8), held-out 72.00; ")
    assert stdout.splitlines() == [  # both are named demo: told apart by their directories
        f"{a} {common}eval mean 82.00 over 2 seeds; vs its baseline +3.00 [+2.00, +4.00] better",
        f"{b} {common}eval mean 85.50 over 2 seeds; vs its baseline +6.50 [+5.00, +8.00] better; vs {a}'s choice "
        "+3.50 [+3.00, +4.00] better",
        f"report in {out}"]
    assert sorted(path.name for path in out.iterdir()) == [".istar-report", "searches.csv", "searches.md",
                                                           "searches.png"]
    with open(out / "searches.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["search"], row["steps"], row["hours"], row["chosen"], row["held_out"], row["seeds"], row["mean"],
             row["versus_first_difference"], row["versus_first_verdict"]) for row in rows] == [
        (str(a), "270", "0.11", "trial 1", "72.0", "2", "82.0", "", ""),
        (str(b), "270", "0.11", "trial 1", "72.0", "2", "85.5", "3.5", "better")]
    text = (out / "searches.md").read_text()
    assert text.splitlines()[0].endswith("Their trials run alike but for the values searched.")
    # the progress figure's points: steps trained by the trials that ended, in the order they ended
    assert search_report.progress_points(searches.read(a)) == [(60, 62.0), (120, 72.0), (270, 72.0)]


def test_a_comparison_the_searches_final_runs_cannot_pair_says_why(tmp_path):
    a = build(tmp_path / "a")
    b = build(tmp_path / "b", final={"trial1": {3: 0.83, 4: 0.88}, "baseline": {1: 0.78}})
    c = build(tmp_path / "c", final={})
    code, stdout, _ = istar_report(a, b, c, "--out", tmp_path / "compared")
    lines = stdout.splitlines()
    assert code == 0 and "not compared" not in lines[0]
    assert lines[1].endswith("eval mean 85.50 over 2 seeds; vs its baseline: not compared (no final run of it shares "
                             f"a seed with this choice's); vs {a}'s choice: not compared (no final run of it shares a "
                             "seed with this choice's)")
    assert lines[2].endswith("held-out 72.00; vs its baseline: not compared (no final run of its choice yet); vs "
                             f"{a}'s choice: not compared (no final run of its choice yet)")


def test_the_caption_says_what_the_searches_runs_differ_in_beyond_the_values(tmp_path):
    a, b = build(tmp_path / "a"), build(tmp_path / "b")
    record = yaml.safe_load((b / "search.yaml").read_text())
    record["fixed"]["optim.lr"] = "3e-05"
    (b / "search.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    assert istar_report(a, b, "--out", tmp_path / "out")[0] == 0
    caption = (tmp_path / "out" / "searches.md").read_text().splitlines()[0]
    assert caption.endswith(f"differ beyond the values searched, in: optim.lr ({a} unset, {b} 3e-05).")


def test_searches_of_different_tasks_mixed_with_grids_or_without_out_are_one_line(tmp_path):
    a, b = build(tmp_path / "a"), build(tmp_path / "b")
    record = yaml.safe_load((b / "search.yaml").read_text())
    record["fixed"]["recipe"] = "rte"
    (b / "search.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    grid = tmp_path / "grid"
    grid.mkdir()
    assert istar_report(a, b, "--out", tmp_path / "out") == (
        2, "", "istar-report: error: searches of different tasks (rte, sst2) are not compared: their choices are "
               "scored on different metrics\n")
    assert istar_report(a, grid, "--out", tmp_path / "out") == (
        2, "", f"istar-report: error: {a} is a search directory: report or archive it alone (istar-report {a} "
               f"[--archive DIR]), or compare it with other searches (istar-report {a} SEARCH_DIR ... --out DIR); "
               f"{grid} is no search directory\n")
    assert istar_report(a, b) == (2, "", "istar-report: error: several SEARCH_DIRs are compared: name the report's "
                                         "folder with --out\n")
    assert not (tmp_path / "out").exists() and sorted(p.name for p in grid.iterdir()) == []


def test_a_docs_marker_renders_the_comparison_of_two_archived_searches(tmp_path):
    a, b = build(tmp_path / "a"), build(tmp_path / "b", final=FINAL_B)
    for search, archive in ((a, tmp_path / "evidence" / "a"), (b, tmp_path / "evidence" / "b")):
        assert istar_report(search, "--archive", archive)[0] == 0
    assert istar_report(a, b, "--out", tmp_path / "live")[0] == 0
    page = "<!-- table: evidence/a+evidence/b searches.md -->\nstale\n<!-- end table -->\n"
    rendered = docs_tables.render_page(page, tmp_path)
    live = (tmp_path / "live" / "searches.md").read_text().replace(str(a), "a").replace(str(b), "b")
    archived = rendered.replace(str(tmp_path / "evidence" / "a"), "a").replace(str(tmp_path / "evidence" / "b"), "b")
    assert archived.split("\n", 1)[1].rsplit("<!--", 1)[0] == live
