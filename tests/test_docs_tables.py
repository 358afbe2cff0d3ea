"""The docs' results tables (reports.docs_tables): a marker renders a table from an archive in docs/evidence/ and
--check shows a changed record, a bad marker is one line that changes nothing, a transcribed table says so under it,
every results table in the docs has an archive or says it was transcribed, and every archive in docs/evidence/ is one
the docs show. The archived grid is tests/test_grid_archive.py's synthetic grid."""
import json
from pathlib import Path

import pytest
from test_grid_archive import make_grid, report, tables

from istar_plugin.reports import docs_tables
from istar_plugin.reports.records.analyses import EMBEDDINGS
from istar_plugin.storage.ownership import ANALYSIS_MARKER

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "docs" / "evidence"
NOT_FROM_RUNS = {"criterions.csv", "exit_codes.csv", "run_files.csv", "embedding_measures.csv",
                 "lora_step_smollm2.csv"}
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
    assert capsys.readouterr().out == f"{page}: 3 table(s), differs\n"


@pytest.mark.parametrize("marker, message", [
    ("evidence/rte table9.md", "expected FILE, FILE transcribed, or ARCHIVE TABLE"),
    ("evidence/rte table1.md --paper-model gpt", "--paper-model gpt is not one of albert, bert, distilbert"),
    ("evidence/rte table1.md --out x", "expected FILE, FILE transcribed, or ARCHIVE TABLE"),
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


def test_a_transcribed_table_says_so_under_it(tmp_path):
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    page = tmp_path / "p.md"
    page.write_text("<!-- table: t.csv transcribed -->\n<!-- end table -->\n")
    assert docs_tables.main([str(page)]) == 0
    assert page.read_text() == ("<!-- table: t.csv transcribed -->\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
                                f"{docs_tables.TRANSCRIBED}\n<!-- end table -->\n")
    assert docs_tables.TRANSCRIBED.startswith("*Records lost; transcribed:")


def docs_markers():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [(page, docs_tables.parse_marker(source)) for page in pages
            for source, _ in docs_tables.marked_tables(page.read_text())]


def test_every_results_table_without_an_archive_says_it_was_transcribed():
    untold = [f"{page.name}: {marker.path}" for page, marker in docs_markers()
              if marker.table is None and not marker.transcribed and Path(marker.path).name not in NOT_FROM_RUNS]
    assert not untold, f"results tables with neither an archive nor the transcribed mark: {untold}"


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
