"""Render the documentation's tables and quoted values from data: ``<!-- table: SOURCE -->`` ...
``<!-- end table -->`` holds the table SOURCE names, ``<!-- value: SOURCE | ROW | COLUMN -->`` ...
``<!-- end value -->`` one cell of it (ROW: ``COLUMN=TEXT`` conditions joined by ``;`` that pick one row). ``python -m
istar_plugin.reports.docs_tables docs/ README.md`` rewrites every marked region; ``--check`` lists the pages that
differ from their sources and exits 1. A page whose markers do not pair is refused before any page is written."""
from __future__ import annotations

import argparse
import csv
import itertools
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
from .grid_report import TABLES, Grid, write_grid
from .paper.istar import PAPER_MODELS
from .outputs import analysis_table, embedding_table
from .records import analyses, searches
from .records.cells import collect_files
from .tables import markdown_table

TOKEN = re.compile(r"<!-- (?:(?P<kind>table|value):(?P<source>[^\n]*?)|end (?P<end>table|value)) -->")
CODE = re.compile(r"^```.*?^```[ \t]*$|(?<!`)(`+)(?!`)(?:(?!\n[ \t]*\n|\n<!-- ).)+?(?<!`)\1(?!`)", re.S | re.M)
"""Fenced blocks and code spans: a marker written in them is shown, not rendered."""
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

    @property
    def paths(self) -> list[str]:
        """The archives or file the marker names (``ARCHIVE+ARCHIVE``: several)."""
        return self.path.split("+")


def parse_marker(source: str) -> Marker:
    """The marker's words as a :class:`Marker`; a ValueError naming the forms for anything else."""
    words = source.split()
    if len(words) == 1:
        return Marker(words[0])
    if words[1:] == ["transcribed"]:
        raise ValueError(f"<!-- table: {source} -->: a transcribed table is refused: a results table is rendered from "
                         "an archive (istar-report --archive) or from a file a script wrote")
    path, table, *options = words or ("", "")
    if table not in REPORT_FILES or len(options) % 2 or not set(options[::2]) <= set(REPORT_OPTIONS):
        raise ValueError(f"<!-- table: {source} -->: expected FILE or ARCHIVE TABLE "
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
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(rows[0]):
            raise ValueError(f"{path}, row {number}: {len(row)} cells, the header has {len(rows[0])}")
    return rows


def render_csv(path: str | Path) -> str:
    """The Markdown table of one CSV file (``|`` in a cell escaped)."""
    rows = read_csv(path)
    return markdown_table(rows[0], rows[1:], escape=True)


@dataclass(frozen=True)
class Region:
    """One marked region of a page: ``kind`` (table or value), ``source``, its body's offsets and its marker's line."""

    kind: str
    source: str
    start: int
    end: int
    line: int


def regions(text: str, page: str | Path = "page") -> list[Region]:
    """Every marked region of a page, in order (none in code); a ValueError naming page, line and a misplaced marker."""
    masked = CODE.sub(lambda code: re.sub(r"[^\n]", " ", code.group()), text)
    found: list[Region] = []
    start, start_line, opening = None, 0, ""
    for token in TOKEN.finditer(masked):
        line = text.count("\n", 0, token.start()) + 1
        where = f"{page}, line {line}: {text[token.start():token.end()]}"
        kind = token.group("kind") or token.group("end")
        if start is None:
            if token.group("end"):
                raise ValueError(f"{where} has no <!-- {kind}: ... --> before it; nothing was written")
            if kind == "table" and not (text[token.start() - 1:token.start()] in ("", "\n")
                                        and text[token.end():token.end() + 1] == "\n"):
                raise ValueError(f"{where}: a table marker is a line of its own; nothing was written")
            start, start_line, opening = token, line, kind
            continue
        started = f"{page}, line {start_line}: {text[start.start():start.end()]}"
        if token.group("kind"):
            raise ValueError(f"{started} has no <!-- end {opening} --> before the next marker (line {line}); nothing "
                             "was written")
        if kind != opening:
            raise ValueError(f"{where} ends the {opening} marker of line {start_line}; expected "
                             f"<!-- end {opening} -->; nothing was written")
        if kind == "value" and line != start_line:
            raise ValueError(f"{started}: a value's end marker is on the same line; found one on line {line}; nothing "
                             "was written")
        if kind == "table" and text[token.start() - 1] != "\n":
            raise ValueError(f"{where}: an end table marker starts a line; nothing was written")
        found.append(Region(kind, text[start.start("source"):start.end("source")].strip(),
                            start.end() + (kind == "table"), token.start(), start_line))
        start = None
    if start is not None:
        raise ValueError(f"{page}, line {start_line}: {text[start.start():start.end()]} has no <!-- end {opening} --> "
                         "after it; nothing was written")
    return found


def marked_tables(text: str, page: str | Path = "page") -> list[tuple[str, str]]:
    """(the marker's source as written, current table text) for every marked table of a page."""
    return [(region.source, text[region.start:region.end]) for region in regions(text, page) if region.kind == "table"]


def marked_values(text: str, page: str | Path = "page") -> list[tuple[str, str]]:
    """(the marker's source as written, current value) for every marked value of a page."""
    return [(region.source, text[region.start:region.end]) for region in regions(text, page) if region.kind == "value"]


def parse_value(source: str) -> tuple[str, tuple[tuple[str, str], ...], str]:
    """A value marker's words: the table's source, the row's ``(column, text)`` conditions and the column."""
    parts = [part.strip().replace("\\|", "|") for part in re.split(r"(?<!\\)\|", source)]  # "\|": a | in a cell
    conditions = [condition.partition("=") for condition in parts[1].split(";")] if len(parts) == 3 else []
    if len(parts) != 3 or not all(parts) or not all(equals for _, equals, _ in conditions):
        raise ValueError(f"<!-- value: {source} -->: expected SOURCE | COLUMN=TEXT[; COLUMN=TEXT...] | COLUMN, with "
                         "SOURCE as a table marker's and the conditions picking one row of its table")
    parse_marker(parts[0])
    return parts[0], tuple((name.strip(), text.strip()) for name, _, text in conditions), parts[2]


def table_cells(markdown: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) of every Markdown table in ``markdown``, cells stripped and unescaped."""
    tables = [[[cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in block]
              for is_table, block in itertools.groupby(markdown.splitlines(), lambda line: line.startswith("|"))
              if is_table]
    return [(table[0], table[2:]) for table in tables]


def column(header: list[str], name: str, source: str) -> Optional[int]:
    """The index of column ``name`` (``NAME#N``: the Nth of that name) in ``header``; None when it has none."""
    base, _, number = name.rpartition("#") if re.search(r"#\d+$", name) else (name, "", "")
    indices = [index for index, title in enumerate(header) if title == base]
    if number:
        return indices[int(number) - 1] if 0 < int(number) <= len(indices) else None
    if len(indices) > 1:
        raise ValueError(f"<!-- value: {source} -->: the table has {len(indices)} columns {base!r}; name one as "
                         f"{base}#1 to {base}#{len(indices)}")
    return indices[0] if indices else None


def render_source(path: str | Path) -> str:
    """The Markdown of one table file: a CSV rendered, or a ``.md`` file (a table ``istar-report`` wrote) as it is."""
    if Path(path).suffix == ".md":
        text = Path(path).read_text(encoding="utf-8")
        return text if text.endswith("\n") else text + "\n"
    return render_csv(path)


class ArchiveReports(tempfile.TemporaryDirectory):
    """The ``istar-report`` outputs of archives, each written once into a temporary folder."""

    def __init__(self) -> None:
        super().__init__(prefix="docs_tables_")
        self._reports: dict[tuple, Path] = {}
        self._left_out: dict[tuple, list[tuple[str, str]]] = {}

    def table(self, archives: Sequence[Path], name: str, options: tuple[tuple[str, str], ...] = ()) -> str:
        key = (tuple(archive.resolve() for archive in archives), options)
        shown = "+".join(map(str, archives))
        if key not in self._reports:
            folder = Path(self.name) / str(len(self._reports))
            if len(archives) > 1 and all(map(searches.is_search, archives)):
                comparison = search_report.compare_searches([searches.read(archive) for archive in archives])
                search_report.write_comparison(comparison, folder)
            elif any(map(searches.is_search, archives)) and len(archives) > 1:
                raise ValueError(f"{shown}: a search archive is compared with other searches only")
            elif len(archives) == 1 and analyses.is_analysis(archives[0]):
                analysis_table.write_summary(analyses.read_analyses(archives[0]), folder)
            elif len(archives) == 1 and (analyses.is_embedding_report(archives[0])
                                         or name == embedding_table.TABLE_FILE):  # its error names embeddings.json
                table = embedding_table.report_markdown(analyses.read_embedding_results(archives[0]),
                                                        analyses.read_embedding_record(archives[0]).get("scored"))
                folder.mkdir(parents=True)
                (folder / embedding_table.TABLE_FILE).write_text(table, encoding="utf-8")
            elif searches.is_search(archives[0]):
                search_report.write_report(search_report.Report(searches.read(archives[0]), **dict(options)), folder)
            else:
                records, self._left_out[key[0]], files = collect_files(*archives)
                if not records:
                    raise ValueError(f"{shown}: no finished cell to report on")
                write_grid(Grid(records, files=files, **dict(options)), folder)
            self._reports[key] = folder
        path = self._reports[key] / name
        if not path.is_file():
            raise ValueError(f"{shown}: istar-report writes no {name} for its cells")
        return render_source(path)

    def left_out(self, base: str | Path, source: str) -> list[tuple[str, str]]:
        """(cell, reason) for every cell of the archives a rendered table marker names that its report left out."""
        return self._left_out.get(tuple((Path(base) / path).resolve() for path in parse_marker(source).paths), [])

    def __enter__(self) -> "ArchiveReports":
        return self


def render_marker(source: str, base: str | Path, reports: ArchiveReports) -> str:
    """The table a marker's ``source`` names (paths relative to ``base``)."""
    marker = parse_marker(source)
    if marker.table is not None:
        return reports.table([Path(base) / path for path in marker.paths], marker.table, marker.options)
    return render_source(Path(base) / marker.path)


def render_value(source: str, base: str | Path, reports: ArchiveReports) -> str:
    """The cell a value marker's ``source`` names (paths relative to ``base``); a ValueError unless one row has it."""
    table, conditions, wanted = parse_value(source)
    found: list[str] = []
    for header, rows in table_cells(render_marker(table, base, reports)):
        indices = [column(header, name, source) for name, _ in conditions]
        target = column(header, wanted, source)
        if target is None or None in indices:
            continue
        found += [row[target] for row in rows
                  if all(row[index] == text for index, (_, text) in zip(indices, conditions))]  # type: ignore[index]
    if len(found) != 1:
        where = "; ".join(f"{name}={text}" for name, text in conditions)
        raise ValueError(f"<!-- value: {source} -->: {len(found)} rows have {where} and a column {wanted!r} "
                         "(exactly one must)")
    return found[0]


def render_page(text: str, base: str | Path, reports: Optional[ArchiveReports] = None,
                page: str | Path = "page") -> str:
    """The page with every marked region replaced by its table or value (paths relative to ``base``)."""
    if reports is None:
        with ArchiveReports() as reports:
            return render_page(text, base, reports, page)
    parts, done = [], 0
    for region in regions(text, page):
        render = render_marker if region.kind == "table" else render_value
        parts += [text[done:region.start], render(region.source, base, reports)]
        done = region.end
    return "".join(parts) + text[done:]


def pages(targets: list[str | Path]) -> list[Path]:
    """Markdown files named, or found (recursively) in the directories named."""
    return [page for target in map(Path, targets)
            for page in (sorted(target.rglob("*.md")) if target.is_dir() else [target])]


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
    """Render every marked region of ``targets``, then rewrite the stale pages; ``check``: 1 if one is stale instead."""
    rendered: list[tuple[Path, str, str]] = []
    with ArchiveReports() as reports:
        for page in targets:
            text = page.read_text(encoding="utf-8")
            rendered.append((page, text, render_page(text, page.parent, reports, page)))
        for page, text, new in rendered:
            marked = regions(text, page)
            tables = [region for region in marked if region.kind == "table"]
            values = len(marked) - len(tables)
            if not marked:
                continue
            if not check and new != text:
                atomic_write_text(page, new)
            state = "up to date" if new == text else "differs" if check else "rewritten"
            print(f"{page}: {len(tables)} table(s), {f'{values} value(s), ' if values else ''}{state}")
            for region in tables:
                if left_out := reports.left_out(page.parent, region.source):
                    cell, reason = left_out[0]
                    more = f" (and {len(left_out) - 1} more)" if len(left_out) > 1 else ""
                    print(f"{page}, line {region.line}: {region.source}: {len(left_out)} archived cell(s) left out "
                          f"of the table: {cell}: {' '.join(reason.split())}{more}")
    return 1 if check and any(new != text for _, text, new in rendered) else 0


if __name__ == "__main__":
    sys.exit(main())
