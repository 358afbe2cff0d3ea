"""Render the documentation's tables (``<!-- table: SOURCE -->`` ... ``<!-- end table -->``) from data:
``python -m istar_plugin.reports.docs_tables docs/ README.md`` rewrites every marked region; ``--check`` lists the
pages whose tables differ from their sources and exits 1."""
from __future__ import annotations

import argparse
import csv
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ..errors import RunDirError
from ..storage.atomic import atomic_write_text
from . import search_report
from .comparisons.versus_reference import parse_reference
from .grid_report import TABLES, write_report
from .paper.istar import PAPER_MODELS
from .outputs import analysis_table, embedding_table
from .records import analyses, searches
from .records.cells import collect
from .tables import markdown_table

MARKER = re.compile(r"<!-- table: (?P<source>[^\n]*?) -->\n(?P<body>.*?)<!-- end table -->", re.S)
TRANSCRIBED = ("*Records lost; transcribed: copied once from the output of runs whose directories are gone; no archive "
               "in docs/evidence/ regenerates this table.*")
REPORT_OPTIONS = {"--paper-model": "paper_model", "--reference": "reference"}
MARKED_TABLES = (*TABLES, *search_report.TABLES, *search_report.COMPARISON_TABLES)
REPORT_FILES = sorted({f"{table.name}.md" for table in (*MARKED_TABLES, analysis_table.TABLE) if table.markdown}
                      | {f"{table.name}.csv" for table in MARKED_TABLES if table.csv_rows is not None}
                      | {embedding_table.TABLE_FILE})


@dataclass(frozen=True)
class Marker:
    """What a table is rendered from: the file ``path``, or with ``table`` the report of the archive at ``path``."""

    path: str
    table: Optional[str] = None
    options: tuple[tuple[str, str], ...] = ()  # (write_report's argument, value)
    transcribed: bool = False

    @property
    def paths(self) -> list[str]:
        """The archives or file the marker names (``ARCHIVE+ARCHIVE``: several).

        >>> parse_marker("evidence/a+evidence/b searches.md").paths
        ['evidence/a', 'evidence/b']
        """
        return self.path.split("+")


def parse_marker(source: str) -> Marker:
    """The marker's words as a :class:`Marker`; a ValueError naming the forms for anything else."""
    words = source.split()
    if len(words) == 1:
        return Marker(words[0])
    if words[1:] == ["transcribed"]:
        return Marker(words[0], transcribed=True)
    path, table, *options = words or ("", "")
    if table not in REPORT_FILES or len(options) % 2 or not set(options[::2]) <= set(REPORT_OPTIONS):
        raise ValueError(f"<!-- table: {source} -->: expected FILE, FILE transcribed, or ARCHIVE TABLE "
                         f"[--paper-model MODEL] [--reference KEY=VALUE] with TABLE one of {', '.join(REPORT_FILES)}")
    given = dict(zip(options[::2], options[1::2]))
    if given.get("--paper-model", "bert") not in PAPER_MODELS:
        raise ValueError(f"<!-- table: {source} -->: --paper-model {given['--paper-model']} is not one of "
                         f"{', '.join(sorted(PAPER_MODELS))}")
    if "--reference" in given:
        parse_reference(given["--reference"])
    return Marker(path, table, tuple((REPORT_OPTIONS[name], value) for name, value in given.items()))


def read_csv(path: str | Path) -> list[list[str]]:
    """The CSV's rows (header first) as strings."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = [row for row in csv.reader(handle) if row]
    if not rows:
        raise ValueError(f"{path} is empty: a table needs at least a header row")
    width = len(rows[0])
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != width:
            raise ValueError(f"{path}, row {number}: {len(row)} cells, the header has {width}")
    return rows


def render_csv(path: str | Path) -> str:
    """The Markdown table of one CSV file (``|`` in a cell escaped)."""
    rows = read_csv(path)
    return markdown_table(rows[0], rows[1:], escape=True)


def marked_tables(text: str) -> list[tuple[str, str]]:
    """(the marker's source as written, current table text) for every marked region of a page."""
    return [(m.group("source"), m.group("body")) for m in MARKER.finditer(text)]


def render_source(path: str | Path) -> str:
    """The Markdown of one table file: a CSV rendered, or a ``.md`` file (a table ``istar-report`` wrote) as it is."""
    if Path(path).suffix == ".md":
        text = Path(path).read_text(encoding="utf-8")
        return text if text.endswith("\n") else text + "\n"
    return render_csv(path)


class ArchiveReports:
    """The ``istar-report`` outputs of archives, each written once into a temporary folder."""

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="docs_tables_")
        self._reports: dict[tuple, Path] = {}

    def table(self, archives: Sequence[Path], name: str, options: tuple[tuple[str, str], ...] = ()) -> str:
        key = (tuple(archive.resolve() for archive in archives), options)
        shown = "+".join(map(str, archives))
        if key not in self._reports:
            folder = Path(self._folder.name) / str(len(self._reports))
            if len(archives) > 1 and all(map(searches.is_search, archives)):
                comparison = search_report.compare_searches([searches.read(archive) for archive in archives])
                search_report.write_comparison(comparison, folder)
            elif any(map(searches.is_search, archives)) and len(archives) > 1:
                raise ValueError(f"{shown}: a search archive is compared with other searches only")
            elif len(archives) == 1 and analyses.is_analysis(archives[0]):
                analysis_table.write_summary(analyses.read_analyses(archives[0]), folder)
            elif len(archives) == 1 and (analyses.is_embedding_report(archives[0])
                                         or name == embedding_table.TABLE_FILE):  # its error names embeddings.json
                table = embedding_table.markdown_table(analyses.read_embedding_results(archives[0]))
                folder.mkdir(parents=True)
                (folder / embedding_table.TABLE_FILE).write_text(table, encoding="utf-8")
            elif searches.is_search(archives[0]):
                search_report.write_report(search_report.Report(searches.read(archives[0]), **dict(options)), folder)
            else:
                records, _ = collect(*archives)
                if not records:
                    raise ValueError(f"{shown}: no finished cell to report on")
                write_report(records, folder, **dict(options))
            self._reports[key] = folder
        path = self._reports[key] / name
        if not path.is_file():
            raise ValueError(f"{shown}: istar-report writes no {name} for its cells")
        return render_source(path)

    def __enter__(self) -> "ArchiveReports":
        return self

    def __exit__(self, *exc_info) -> None:
        self._folder.cleanup()


def render_marker(source: str, base: str | Path, reports: ArchiveReports) -> str:
    """The table a marker's ``source`` names (paths relative to ``base``)."""
    marker = parse_marker(source)
    if marker.table is not None:
        return reports.table([Path(base) / path for path in marker.paths], marker.table, marker.options)
    table = render_source(Path(base) / marker.path)
    return f"{table}\n{TRANSCRIBED}\n" if marker.transcribed else table


def render_page(text: str, base: str | Path, reports: Optional[ArchiveReports] = None) -> str:
    """The page with every marked region replaced by its table (paths relative to ``base``)."""
    if reports is None:
        with ArchiveReports() as reports:
            return render_page(text, base, reports)
    return MARKER.sub(lambda m: f"<!-- table: {m.group('source')} -->\n"
                                f"{render_marker(m.group('source'), base, reports)}<!-- end table -->", text)


def pages(targets: list[str | Path]) -> list[Path]:
    """Markdown files named, or found (recursively) in the directories named."""
    found: list[Path] = []
    for target in map(Path, targets):
        found += sorted(target.rglob("*.md")) if target.is_dir() else [target]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m istar_plugin.reports.docs_tables",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("targets", nargs="+", help="Markdown pages or directories of them")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a table differs from its source")
    args = parser.parse_args(argv)
    try:
        return update(pages(args.targets), args.check)
    except (OSError, UnicodeDecodeError, csv.Error, ValueError, RunDirError) as error:  # bad pages, markers, records
        print(f"docs_tables: {' '.join(str(error).split())}", file=sys.stderr)
        return 2


def update(targets: list[Path], check: bool) -> int:
    """Render every marked table of ``targets``; rewrite stale pages unless ``check``; 1 if ``check`` found one."""
    stale = []
    with ArchiveReports() as reports:
        for page in targets:
            text = page.read_text(encoding="utf-8")
            rendered = render_page(text, page.parent, reports)
            if rendered != text:
                stale.append(page)
                if not check:
                    atomic_write_text(page, rendered)
            count = len(marked_tables(text))
            if count:
                state = "differs" if rendered != text else "up to date"
                if not check and rendered != text:
                    state = "rewritten"
                print(f"{page}: {count} table(s), {state}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
