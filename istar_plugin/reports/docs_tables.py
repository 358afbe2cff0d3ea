"""Render the documentation's result tables from their CSV files, so no number in docs/ is typed by hand.

A docs page marks each table with its CSV (a path relative to the page)::

    <!-- table: results/replication_minilm.csv -->
    | ... the rendered table ... |
    <!-- end table -->

``python -m istar_plugin.reports.docs_tables docs/ [README.md ...]`` rewrites the region between every pair of
markers from its CSV; ``--check`` only reports the pages whose tables differ from their CSVs (exit 1).
Cells are written as the CSV holds them (strings, no reformatting); a ``|`` in a cell is escaped. A marker may
name a ``.md`` file instead, a table ``istar-report`` wrote (``table1.md``, ``versus_base.md``), copied in as it is.
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

from ..storage.atomic import atomic_write_text

MARKER = re.compile(r"<!-- table: (?P<csv>[^ ]+) -->\n(?P<body>.*?)<!-- end table -->", re.S)


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


def _cell(value: str) -> str:
    return value.replace("|", "\\|")


def render_rows(rows: list[list[str]]) -> str:
    """A Markdown table (header, separator, one line per row), ending with a newline."""
    header, *body = rows
    lines = ["| " + " | ".join(_cell(v) for v in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def render_csv(path: str | Path) -> str:
    """The Markdown table of one CSV file."""
    return render_rows(read_csv(path))


def marked_tables(text: str) -> list[tuple[str, str]]:
    """(csv path as written, current table text) for every marked region of a page."""
    return [(m.group("csv"), m.group("body")) for m in MARKER.finditer(text)]


def render_source(path: str | Path) -> str:
    """The Markdown of one table file: a CSV rendered, or a ``.md`` file (a table ``istar-report`` wrote) as it is."""
    if Path(path).suffix == ".md":
        text = Path(path).read_text(encoding="utf-8")
        return text if text.endswith("\n") else text + "\n"
    return render_csv(path)


def render_page(text: str, base: str | Path) -> str:
    """The page with every marked region replaced by its file's table (paths relative to ``base``)."""
    base = Path(base)
    return MARKER.sub(
        lambda m: f"<!-- table: {m.group('csv')} -->\n{render_source(base / m.group('csv'))}<!-- end table -->", text
    )


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
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs from its CSV")
    args = parser.parse_args(argv)
    try:
        return update(pages(args.targets), args.check)
    except (OSError, UnicodeDecodeError, csv.Error, ValueError) as error:  # a missing page or CSV, a malformed CSV
        print(f"docs_tables: {' '.join(str(error).split())}", file=sys.stderr)
        return 2


def update(targets: list[Path], check: bool) -> int:
    """Render every marked table of ``targets``; rewrite stale pages (atomically) unless ``check``; 1 if ``check``
    found a stale one."""
    stale = []
    for page in targets:
        text = page.read_text(encoding="utf-8")
        rendered = render_page(text, page.parent)
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
