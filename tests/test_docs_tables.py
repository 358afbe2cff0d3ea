"""The docs' results tables and quoted values (reports.docs_tables): a marker renders a table or one of its cells
from an archive in docs/evidence/ and --check shows a changed record, a bad marker or markers that do not pair are one
line that writes no page, a transcribed table is refused, an archived cell left out of a table is named, every
results table in the docs is an archive's or a script's own file, and every archive in docs/evidence/ is one the
docs show. The archived grid is tests/test_grid_archive.py's synthetic grid."""
import json
import shutil
from pathlib import Path

import pytest
from test_grid_archive import make_grid, report, tables, write_cell

from istar_plugin.reports import docs_tables
from istar_plugin.reports.records.analyses import EMBEDDINGS
from istar_plugin.storage.ownership import ANALYSIS_MARKER

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "docs" / "evidence"
NOT_FROM_RUNS = {"criterions.csv", "exit_codes.csv", "run_files.csv", "embedding_measures.csv",
                 "lora_step_smollm2.csv", "padding_share_sst2.csv", "penalty_pull.csv", "quick_start.csv",
                 "quick_start_criteria.csv"}
"""docs/results files that are no runs' results: the toolkit's own lists, and a benchmark script's own output."""


@pytest.fixture
def grid(tmp_path):
    return make_grid(tmp_path / "grid")


def test_a_docs_marker_renders_an_archives_table_and_a_changed_record_shows(grid, tmp_path, capsys):
    docs = tmp_path / "docs"
    assert report(capsys, grid, "--archive", docs / "evidence" / "rte")[0] == 0
    assert report(capsys, grid, "--out", tmp_path / "live", "--paper-model", "bert")[0] == 0
    page = docs / "page.md"
    page.write_text("Intro.\n\n<!-- table: evidence/rte versus_base.md -->\n<!-- end table -->\n\n"
                    "<!-- table: evidence/rte table1.md --paper-model bert -->\nold\n<!-- end table -->\n\n"
                    "<!-- table: evidence/rte wall_times.csv -->\n<!-- end table -->\n")
    assert docs_tables.main([str(docs)]) == 0 and docs_tables.main([str(docs), "--check"]) == 0
    live = tables(tmp_path / "live")
    assert page.read_text() == (
        f"Intro.\n\n<!-- table: evidence/rte versus_base.md -->\n{live['versus_base.md']}<!-- end table -->\n\n"
        f"<!-- table: evidence/rte table1.md --paper-model bert -->\n{live['table1.md']}<!-- end table -->\n\n"
        "<!-- table: evidence/rte wall_times.csv -->\n"
        f"{docs_tables.render_csv(tmp_path / 'live' / 'wall_times.csv')}<!-- end table -->\n")
    assert "paper bert" in live["table1.md"]
    capsys.readouterr()
    cell = docs / "evidence" / "rte" / "criterion=istar,seed=1"
    results = json.loads((cell / "results.json").read_text())
    results["metrics"]["accuracy"] = 0.5
    (cell / "results.json").write_text(json.dumps(results))
    assert docs_tables.main([str(page), "--check"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{page}: 3 table(s), differs\n")  # the edited cell disagrees with its predictions.json
    assert out.count("1 archived cell(s) left out of the table") == 3 and "criterion=istar,seed=1" in out


def test_a_docs_table_reads_each_archived_record_once(grid, tmp_path, capsys, monkeypatch):
    from test_report import counted_opens

    docs = tmp_path / "docs"
    assert report(capsys, grid, "--archive", docs / "evidence" / "rte")[0] == 0
    (docs / "page.md").write_text("<!-- table: evidence/rte versus_base.md -->\n<!-- end table -->\n")
    opened = counted_opens(monkeypatch)
    assert docs_tables.main([str(docs)]) == 0
    cells = sorted((docs / "evidence" / "rte").glob("*/results.json"))
    assert cells and {opened[str(cell.parent / name)] for cell in cells
                      for name in ("results.json", "predictions.json")} == {1}


@pytest.mark.parametrize("marker, message", [
    ("evidence/rte table9.md", "expected FILE or ARCHIVE TABLE"),
    ("evidence/rte table1.md --paper-model gpt", "--paper-model gpt is not one of albert, bert, distilbert"),
    ("evidence/rte table1.md --out x", "expected FILE or ARCHIVE TABLE"),
    ("evidence/none table1.md", "grid directory"),
    ("evidence/rte table3.md", "istar-report writes no table3.md for its cells"),
])
def test_a_bad_archive_marker_is_one_line_and_changes_nothing(grid, tmp_path, capsys, marker, message):
    assert report(capsys, grid, "--archive", tmp_path / "evidence" / "rte")[0] == 0
    page = tmp_path / "page.md"
    page.write_text(f"<!-- table: {marker} -->\n<!-- end table -->\n")
    assert docs_tables.main([str(page)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("docs_tables: ") and error.count("\n") == 1 and message in error
    assert page.read_text() == f"<!-- table: {marker} -->\n<!-- end table -->\n"


def test_a_transcribed_table_is_refused_with_one_line_and_the_page_is_left_as_it_was(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    page = tmp_path / "p.md"
    page.write_text("<!-- table: t.csv transcribed -->\n<!-- end table -->\n")
    assert docs_tables.main([str(page)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("docs_tables: ") and error.count("\n") == 1 and "a transcribed table is refused" in error
    assert page.read_text() == "<!-- table: t.csv transcribed -->\n<!-- end table -->\n"


def cell_of(markdown, method, column):
    """The ``column`` cell of ``method``'s row in a Markdown table (read independently of the renderer)."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].split("|")[1:-1]]
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines[2:]]
    return next(row[header.index(column)] for row in rows if row[header.index("Method")] == method)


def test_a_value_marker_renders_one_cell_of_an_archives_table_and_a_changed_record_shows(grid, tmp_path, capsys):
    docs = tmp_path / "docs"
    assert report(capsys, grid, "--archive", docs / "evidence" / "rte")[0] == 0
    assert report(capsys, grid, "--out", tmp_path / "live")[0] == 0
    page = docs / "page.md"
    marker = "<!-- value: evidence/rte versus_base.md | Method=I-STAR | Δ vs Base -->"
    page.write_text(f"I-STAR moved accuracy by {marker}99<!-- end value --> points (`{marker}` shows the form).\n")
    assert docs_tables.main([str(docs)]) == 0
    delta = cell_of(tables(tmp_path / "live")["versus_base.md"], "I-STAR", "Δ vs Base")
    assert delta.startswith(("+", "-")) and delta != "99"
    assert page.read_text() == (f"I-STAR moved accuracy by {marker}{delta}<!-- end value --> points "
                                f"(`{marker}` shows the form).\n")
    assert capsys.readouterr().out == f"{page}: 0 table(s), 1 value(s), rewritten\n"
    assert docs_tables.main([str(page), "--check"]) == 0
    capsys.readouterr()
    cell = docs / "evidence" / "rte" / "criterion=istar,seed=1"
    shutil.rmtree(cell)
    write_cell(cell, "istar", 1, 0)  # the seed's record changed: every prediction wrong
    assert docs_tables.main([str(page), "--check"]) == 1
    assert capsys.readouterr().out == f"{page}: 0 table(s), 1 value(s), differs\n"


@pytest.mark.parametrize("marker, message", [
    ("evidence/rte versus_base.md | Method=I-STAR", "expected SOURCE | COLUMN=TEXT"),
    ("evidence/rte versus_base.md | Method | Δ vs Base", "expected SOURCE | COLUMN=TEXT"),
    ("evidence/rte versus_base.md | Method=Base | Δ vs Base", "0 rows have Method=Base"),
    ("evidence/rte wall_times.md | Task=rte | cells", "2 rows have Task=rte"),
    ("evidence/rte versus_base.md | Method=I-STAR | Δ", "0 rows have Method=I-STAR and a column 'Δ'"),
    ("evidence/rte table9.md | Method=I-STAR | Δ vs Base", "expected FILE or ARCHIVE TABLE"),
])
def test_a_bad_value_marker_is_one_line_and_changes_nothing(grid, tmp_path, capsys, marker, message):
    assert report(capsys, grid, "--archive", tmp_path / "evidence" / "rte")[0] == 0
    page = tmp_path / "page.md"
    text = f"Quoted: <!-- value: {marker} -->1<!-- end value -->.\n"
    page.write_text(text)
    assert docs_tables.main([str(page)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("docs_tables: ") and error.count("\n") == 1 and message in error, error
    assert page.read_text() == text


def test_a_column_named_twice_is_picked_by_its_number(tmp_path):
    (tmp_path / "t.csv").write_text("name,sd,sd\na,1,2\nb,3,4\n")
    page = ("<!-- value: t.csv | name=b | sd#2 -->x<!-- end value --> "
            "<!-- value: t.csv | name=a | sd -->x<!-- end value -->")
    with pytest.raises(ValueError, match="the table has 2 columns 'sd'; name one as sd#1 to sd#2"):
        docs_tables.render_page(page, tmp_path)
    assert docs_tables.render_page(page.replace("| sd -->", "| sd#1 -->"), tmp_path) == page.replace(
        "| sd -->", "| sd#1 -->").replace("-->x<", "-->4<", 1).replace("-->x<", "-->1<", 1)


LOST_END = ("Intro.\n\n<!-- table: t.csv -->\nold table\n\nA paragraph.\n\n<!-- table: t.csv -->\n"
            "<!-- end table -->\nEnd.\n")


@pytest.mark.parametrize("text, line, message", [
    (LOST_END, 3, "<!-- table: t.csv --> has no <!-- end table --> before the next marker (line 8)"),
    ("<!-- table: t.csv -->\nold\n", 1, "<!-- table: t.csv --> has no <!-- end table --> after it"),
    ("A\n<!-- end table -->\n", 2, "<!-- end table --> has no <!-- table: ... --> before it"),
    ("<!-- value: t.csv | a=1 | b -->2<!-- end table -->\n", 1, "ends the value marker of line 1"),
    ("x <!-- value: t.csv | a=1 | b -->2\n<!-- end value -->\n", 1, "a value's end marker is on the same line"),
    ("x <!-- table: t.csv -->\n<!-- end table -->\n", 1, "a table marker is a line of its own"),
])
def test_markers_that_do_not_pair_are_one_line_and_no_page_is_written(tmp_path, capsys, text, line, message):
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    good = tmp_path / "a.md"  # rendered first, stale: it is not written either
    good.write_text("<!-- table: t.csv -->\n<!-- end table -->\n")
    page = tmp_path / "b.md"
    page.write_text(text)
    assert docs_tables.main([str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"docs_tables: {page}, line {line}: ") and message in error and error.count("\n") == 1
    assert "nothing was written" in error
    assert page.read_text() == text and good.read_text() == "<!-- table: t.csv -->\n<!-- end table -->\n"


def test_markers_in_code_are_shown_not_rendered(tmp_path):
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    page = ("Write `<!-- table: SOURCE -->` and `<!-- end table -->`, or\n\n```text\n<!-- table: t.csv -->\n"
            "```\n\nand ``<!-- value: t.csv | a=1 | b -->`` then\n`<!-- end value -->`.\n")
    assert docs_tables.regions(page) == []
    assert docs_tables.render_page(page, tmp_path) == page


def test_an_archived_cell_left_out_of_a_table_is_named_in_one_line(grid, tmp_path, capsys):
    docs = tmp_path / "docs"
    assert report(capsys, grid, "--archive", docs / "evidence" / "rte")[0] == 0
    page = docs / "page.md"
    page.write_text("<!-- table: evidence/rte versus_base.md -->\n<!-- end table -->\n\n"
                    "<!-- table: evidence/rte wall_times.md -->\n<!-- end table -->\n")
    assert docs_tables.main([str(page)]) == 0
    assert capsys.readouterr().out == f"{page}: 2 table(s), rewritten\n"  # nothing left out: nothing said
    (docs / "evidence" / "rte" / "criterion=istar,seed=2" / "results.json").write_text("{damaged")
    assert docs_tables.main([str(page)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{page}: 2 table(s), rewritten"
    assert [line.split(": ", 3)[:3] for line in lines[1:]] == [
        [f"{page}, line 1", "evidence/rte versus_base.md", "1 archived cell(s) left out of the table"],
        [f"{page}, line {4 + page.read_text().splitlines().index('<!-- table: evidence/rte wall_times.md -->') - 3}",
         "evidence/rte wall_times.md", "1 archived cell(s) left out of the table"]]
    assert all("criterion=istar,seed=2" in line for line in lines[1:])


def docs_markers():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [(page, docs_tables.parse_marker(source)) for page in pages
            for source, _ in docs_tables.marked_tables(page.read_text())]


def test_every_results_table_is_rendered_from_an_archive_or_a_scripts_own_file():
    untold = [f"{page.name}: {marker.path}" for page, marker in docs_markers()
              if marker.table is None and Path(marker.path).name not in NOT_FROM_RUNS]
    assert not untold, f"results tables that are neither an archive's nor a script's own file: {untold}"


def test_every_archive_in_docs_evidence_is_an_archive_the_docs_show():
    shown = {(page.parent / path).resolve() for page, marker in docs_markers() if marker.table is not None
             for path in marker.paths}
    archives = sorted(path for path in EVIDENCE.iterdir() if path.is_dir())
    # istar-report --archive's marker, istar-analyze --out's, istar-embed --out's last file (its .istar-embed lists
    # the transforms/ a kept copy leaves out, so it is not kept)
    written_by_the_toolkit = (".istar-archive", ANALYSIS_MARKER, EMBEDDINGS)
    assert all(any((archive / name).is_file() for name in written_by_the_toolkit) for archive in archives), archives
    assert [archive.name for archive in archives if archive.resolve() not in shown] == []
    assert all(path.parent.resolve() == EVIDENCE.resolve() for path in shown)  # archives live in docs/evidence/
