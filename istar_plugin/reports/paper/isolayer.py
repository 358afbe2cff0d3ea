"""The Isotropy Layer paper's Table 3 as data (``isolayer_table3.csv`` beside this module; its source named in
each row): per model, task and stage the median (std) over seeds, EV_1/EV_2/EV_3 and IsoScore.

>>> paper_numbers()["bert", "rte", "2"]["median"]
'70.40'
"""
from __future__ import annotations

import csv
from pathlib import Path

__all__ = ["TABLE3_FILE", "paper_numbers"]

TABLE3_FILE = Path(__file__).with_name("isolayer_table3.csv")


def paper_numbers(path: Path = TABLE3_FILE) -> dict[tuple[str, str, str], dict[str, str]]:
    """(model, task, stage) -> the paper's row of ``isolayer_table3.csv``."""
    with open(path, newline="", encoding="utf-8") as handle:
        return {(row["model"], row["task"], row["stage"]): row for row in csv.DictReader(handle)}
