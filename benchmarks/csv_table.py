"""The benchmarks' ``--csv FILE`` option (the table a script prints, also written as a CSV file), and
:func:`at_least_one`, their type for a count given on the command line.

A script under ``benchmarks/`` imports it as a sibling module (``from csv_table import add_csv_option, write_csv``):
``python benchmarks/NAME.py`` puts ``benchmarks/`` first on ``sys.path``.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence


def add_csv_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--csv FILE`` (``args.csv``: a :class:`~pathlib.Path`, None when not given) to ``parser``; a FILE whose
    folder does not exist is refused when the arguments are read, before anything is measured."""
    parser.add_argument("--csv", type=csv_path, metavar="FILE", help="also write the table it prints to this CSV file")


def csv_path(text: str) -> Path:
    """``--csv``'s FILE, refused (one argparse line) when its folder does not exist."""
    path = Path(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: its folder {str(path.parent)!r} does not exist")
    return path


def at_least_one(text: str) -> int:
    """A count given on the command line (``--rounds``, ``--batch``): a whole number of at least 1, else one argparse
    line naming the value."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of at least 1")
    return int(text)


def write_csv(path: Optional[Path], header: Sequence[str], rows: Iterable[Sequence[Any]],
              part: Optional[str] = None) -> None:
    """Write ``header`` and ``rows`` (cells as printed: text, or numbers ``str`` writes) to ``path``; nothing when
    ``path`` is None. A script that prints several tables writes its first to ``path`` and each other with its
    ``part`` name beside it: ``part="targets"`` writes ``timings.csv``'s table to ``timings_targets.csv``."""
    if path is None:
        return
    if part is not None:
        path = path.with_name(f"{path.stem}_{part}{path.suffix}")
    table = [list(header), *map(list, rows)]
    for row in table[1:]:
        if len(row) != len(table[0]):
            raise ValueError(f"a row of {len(row)} cells under a header of {len(table[0])}: {row}")
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(table)
