"""Numbers the papers report, as data naming its source: the CSV files in :data:`DATA`."""
import csv
from pathlib import Path

DATA = Path(__file__).parent


def paper_rows(name: str | Path) -> list[dict[str, str]]:
    """The rows of a paper's CSV file (``name`` in :data:`DATA`, or a path), its ``#`` lines (the source) skipped."""
    with open(DATA / name, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))
