"""``scripts/error_sweep.py`` (the documented sweep of 117 bad inputs and faults) runs, and every outcome is clear:
one line and a non-zero exit, or a fault survived with a warning naming it; no traceback, nothing silent."""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPEN_TO_OTHERS = all(folder.stat().st_mode & 0o001 for folder in [ROOT, *ROOT.parents])
"""Whether uid 65534 reaches this checkout: else the sweep leaves out its 5 cases run as that user."""


@pytest.fixture
def open_work():
    """A scratch folder the sweep's unprivileged user may enter (pytest's tmp_path lies under a 0700 folder)."""
    work = Path(tempfile.mkdtemp(prefix="istar-sweep-"))
    work.chmod(0o755)
    yield work
    shutil.rmtree(work)


@pytest.mark.slow  # 117 cases, most of them an istar-run process
def test_every_bad_input_and_fault_of_the_sweep_is_clear(open_work, tmp_path, shared_data):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "error_sweep.py"),
                             "--work", str(open_work / "sweep"), "--json", str(tmp_path / "sweep.json")],
                            capture_output=True, text=True, timeout=2400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    unclear = [(case["case"], case["verdict"], case["last_line"])
               for case in sweep["cases"] if case["verdict"] != "clear"]
    cases = 117 if OPEN_TO_OTHERS else 112
    assert sweep["counts"] == {"clear": cases} and unclear == [], unclear
    assert result.stdout.rstrip().endswith(f"counts: clear {cases} (of {cases})")


def test_the_permission_cases_refuse_a_work_folder_the_unprivileged_user_cannot_enter(tmp_path):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "error_sweep.py"), "--work",
                             str(closed / "sweep"), "--only", "*as a user"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr and not (closed / "sweep").exists()
    assert "uid 65534 may not enter" in result.stderr and "(mode 0700)" in result.stderr


def test_the_sweep_refuses_a_work_directory_of_someone_elses_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "error_sweep.py"), "--work", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "holds files this sweep did not write" in result.stderr
    assert "Traceback" not in result.stderr and (tmp_path / "notes.txt").read_text() == "mine"
