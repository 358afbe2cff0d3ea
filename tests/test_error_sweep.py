"""``scripts/error_sweep.py`` (the documented sweep of 158 bad inputs and faults, 38 of them istar-tune's and
istar-report's of a search: tests/test_error_sweep_searches.py checks their lines) runs, and every outcome is clear:
one line and a non-zero exit, or a fault survived with a warning naming it; no traceback, nothing silent. Its 6 cases
run as uid 65534 run from any clone, one under a 0700 folder too (scripts/unprivileged.py overlays it), and one whose
process never got as far as its tool is a broken setup, not clear."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # scripts/ is no package
from error_sweep import Case, Outcome, classify
from unprivileged import Unavailable, command_wrapper

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def user_switch():
    """The sweep's cases run as uid 65534 can run here: else skipped, or failed under CI (``CI`` set), where they
    must run (as in tests/test_permissions.py)."""
    try:
        command_wrapper(sys.executable, ROOT)
    except Unavailable as reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the error sweep's cases run as uid 65534", pytrace=False)
        pytest.skip(str(reason))


@pytest.fixture
def open_work():
    """A scratch folder the sweep's unprivileged user may enter (pytest's tmp_path lies under a 0700 folder)."""
    work = Path(tempfile.mkdtemp(prefix="istar-sweep-"))
    work.chmod(0o755)
    yield work
    shutil.rmtree(work)


@pytest.mark.slow  # 158 cases, most of them an istar-run process
def test_every_bad_input_and_fault_of_the_sweep_is_clear(user_switch, open_work, tmp_path, shared_data):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "error_sweep.py"),
                             "--work", str(open_work / "sweep"), "--json", str(tmp_path / "sweep.json")],
                            capture_output=True, text=True, timeout=2400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    unclear = [(case["case"], case["verdict"], case["last_line"])
               for case in sweep["cases"] if case["verdict"] != "clear"]
    assert sweep["counts"] == {"clear": 158} and unclear == [], unclear
    assert result.stdout.rstrip().endswith("counts: clear 158 (of 158)")


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


AS_USER = Case("data file unreadable, as a user", ["data.train_file=FILE:t.tsv"], as_user=True)


def test_a_case_run_as_the_user_whose_package_does_not_import_is_a_broken_setup_not_clear(tmp_path):
    # the one line a process prints where uid 65534 cannot reach the checkout, for real: -I -S leave the venv's
    # packages and PYTHONPATH out, as an unreachable folder does (a non-zero exit and one line: "clear" before)
    done = subprocess.run([sys.executable, "-I", "-S", "-m", "istar_plugin.cli"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, len(done.stderr.splitlines())) == (1, 1), done.stderr
    assert "No module named 'istar_plugin'" in done.stderr
    assert classify(AS_USER, Outcome(done.returncode, done.stdout, done.stderr, 0.1)) == "broken-setup"


@pytest.mark.parametrize("stderr", [
    f"Traceback (most recent call last):\n  File \"<frozen runpy>\", line 189, in _run_module_as_main\n"
    f"PermissionError: [Errno 13] Permission denied: '{ROOT / 'istar_plugin' / 'cli' / '__init__.py'}'\n",
    "setpriv: failed to execute /root/.pyenv/versions/3.11.7/bin/python3.11: Permission denied\n",
    "mount: /tmp/tmp.x: permission denied.\n",
])
def test_a_case_run_as_the_user_that_never_reached_its_tool_is_a_broken_setup(stderr):
    assert classify(AS_USER, Outcome(1, "", stderr, 0.1)) == "broken-setup"


def test_the_tools_own_refusal_run_as_the_user_is_clear():
    line = "istar-run: error: cannot read data file /w/t.tsv: permission denied (check its mode and owner)\n"
    assert classify(AS_USER, Outcome(3, "", line, 0.1)) == "clear"
