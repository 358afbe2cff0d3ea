"""``scripts/error_sweep.py`` (the documented sweep of 105 bad inputs and faults) runs, and every outcome is clear:
one line and a non-zero exit, or a fault survived with a warning naming it; no traceback, nothing silent."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # 105 cases, most of them an istar-run process
def test_every_bad_input_and_fault_of_the_sweep_is_clear(tmp_path, shared_data):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "error_sweep.py"),
                             "--work", str(tmp_path / "sweep"), "--json", str(tmp_path / "sweep.json")],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    unclear = [(case["case"], case["verdict"], case["last_line"])
               for case in sweep["cases"] if case["verdict"] != "clear"]
    assert sweep["counts"] == {"clear": 105} and unclear == [], unclear
    assert result.stdout.rstrip().endswith("counts: clear 105 (of 105)")


def test_the_sweep_refuses_a_work_directory_of_someone_elses_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "error_sweep.py"), "--work", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "holds files this sweep did not write" in result.stderr
    assert "Traceback" not in result.stderr and (tmp_path / "notes.txt").read_text() == "mine"
