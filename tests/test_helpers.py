"""The shared test setup: the helpers' and the tolerances' own examples run and print what they say, and a test of
the shared data skips where the data are absent but fails under CI."""
import doctest
import os
import shutil
import subprocess
import sys
from pathlib import Path

import helpers
import tolerances

TESTS = Path(__file__).resolve().parent


def test_helper_examples_run():
    result = doctest.testmod(helpers)
    assert result.attempted >= 2 and result.failed == 0


def test_tolerance_examples_run():
    result = doctest.testmod(tolerances)
    assert result.attempted >= 10 and result.failed == 0


def test_under_ci_missing_shared_data_fails_instead_of_skipping(tmp_path):
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_uses_data.py").write_text("def test_data(shared_data):\n    pass\n\n"
                                                "def test_other():\n    pass\n")
    environment = {**os.environ, "ISTAR_SHARED_DATA": str(tmp_path / "absent")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    local = subprocess.run(command, capture_output=True, text=True, env={**environment, "CI": ""}, cwd=tmp_path)
    assert local.returncode == 0 and "1 passed, 1 skipped" in local.stdout
    ci = subprocess.run(command, capture_output=True, text=True, env={**environment, "CI": "true"}, cwd=tmp_path)
    assert ci.returncode == 1 and "CI=true requires it" in ci.stdout and "1 passed, 1 error" in ci.stdout
