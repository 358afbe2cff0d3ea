"""The benchmarks' ``--csv FILE``: benchmarks/csv_table.py writes the table a script prints, every script under
benchmarks/ offers it, and a script's CSV holds the rows it printed."""
import argparse
import ast
import csv
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
spec = importlib.util.spec_from_file_location("csv_table", BENCHMARKS / "csv_table.py")
csv_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(csv_table)

cells = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=12)


def read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


@settings(max_examples=40, deadline=None)
@given(width=st.integers(1, 5), data=st.data())
def test_the_csv_reads_back_as_the_header_and_rows_written(tmp_path_factory, width, data):
    header = data.draw(st.lists(cells, min_size=width, max_size=width))
    rows = data.draw(st.lists(st.lists(cells, min_size=width, max_size=width), max_size=4))
    path = tmp_path_factory.mktemp("csv") / "table.csv"
    csv_table.write_csv(path, header, rows)
    assert read(path) == [header, *rows]


def test_numbers_are_written_as_printed_and_a_part_goes_beside_the_file(tmp_path):
    csv_table.write_csv(tmp_path / "t.csv", ["d", "ms"], [[384, "441.7"], [768, 2812.5]])
    csv_table.write_csv(tmp_path / "t.csv", ["label", "I1"], [["polynomial c1=1.0", "0.9912"]], part="targets")
    assert read(tmp_path / "t.csv") == [["d", "ms"], ["384", "441.7"], ["768", "2812.5"]]
    assert read(tmp_path / "t_targets.csv") == [["label", "I1"], ["polynomial c1=1.0", "0.9912"]]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["t.csv", "t_targets.csv"]


def test_without_a_path_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    csv_table.write_csv(None, ["a"], [["1"]])
    assert list(tmp_path.iterdir()) == []


def test_a_row_that_does_not_fit_the_header_is_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(ValueError, match="a row of 3 cells under a header of 2"):
        csv_table.write_csv(tmp_path / "t.csv", ["a", "b"], [["1", "2"], ["1", "2", "3"]])
    assert not (tmp_path / "t.csv").exists()


def calls(path: Path) -> set[str]:
    return {node.func.id for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)}


@pytest.mark.parametrize("script", sorted(path.name for path in BENCHMARKS.glob("*.py")
                                          if path.name != "csv_table.py"))
def test_every_benchmark_offers_csv_and_writes_its_table(script):
    source = (BENCHMARKS / script).read_text()
    assert {"add_csv_option", "write_csv"} <= calls(BENCHMARKS / script), f"{script} has no --csv"
    assert "[--csv FILE]" in source.split('"""')[1], f"{script}'s usage line does not show --csv"


def test_a_benchmark_writes_the_rows_it_printed(tmp_path):
    out = tmp_path / "startup.csv"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "startup.py"), "--repeats", "1", "--csv", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    table = read(out)
    assert table[0] == ["command", "median s", "repeats", "CPU", "load average"]
    printed = [line for line in done.stdout.splitlines() if line.startswith("istar-run ")]
    assert [row[0] for row in table[1:]] == ["istar-run --help", "istar-run --list engines",
                                             "istar-run recipe=movie_snippets --cfg", "istar-run batch_size=0"]
    assert len(printed) == len(table) - 1
    for line, row in zip(printed, table[1:]):
        assert line.startswith(row[0]) and f" {row[1]} s " in line and row[2] == "1"


def test_a_csv_file_in_a_missing_folder_is_refused_before_anything_is_measured(tmp_path):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "startup.py"), "--csv", str(tmp_path / "no" / "x.csv")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.splitlines()[-1].endswith("does not exist") and "--csv" in done.stderr.splitlines()[-1]


@pytest.mark.parametrize("text", ["0", "-3", "x", "1.5", ""])
def test_a_count_below_one_or_not_whole_is_refused_naming_the_value(text):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{re.escape(repr(text))}: a whole number of at least 1$"):
        csv_table.at_least_one(text)


@given(st.integers(1, 10**6))
def test_a_whole_count_of_at_least_one_is_taken_as_it_is(count):
    assert csv_table.at_least_one(str(count)) == count


def test_the_quick_starts_baseline_runs_the_baseline_trees_package(tmp_path, monkeypatch):
    """``python -m`` imports the working folder's package before PYTHONPATH's: run from the project's root, a
    baseline would be this tree again."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("quick_start", BENCHMARKS / "quick_start.py")
    quick_start = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quick_start)
    package = tmp_path / "baseline" / "istar_plugin" / "cli"
    package.mkdir(parents=True)
    for init in (package.parent / "__init__.py", package / "__init__.py"):
        init.write_text("")
    (package / "__main__.py").write_text("import sys\nsys.exit('the baseline tree ran')\n")
    monkeypatch.chdir(BENCHMARKS.parent)  # where this tree's package would shadow it
    with pytest.raises(SystemExit, match="the baseline tree ran"):
        quick_start.run("auto", "", str(tmp_path / "baseline"), tmp_path / "out")
