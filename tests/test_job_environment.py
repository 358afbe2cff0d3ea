"""Jobs run the code of the process that starts them: a grid started beside another checkout of istar_plugin (whose
folder submitit's ``python -m`` would put first on ``sys.path``) still runs its own package."""
import os

import pytest
from test_launch import tiny_arguments

from istar_plugin.launch import grid as grid_module
from istar_plugin.launch.options import parse
from istar_plugin.launch.submit import launch, plan

pytestmark = pytest.mark.slow


def test_a_local_cell_started_beside_another_checkout_runs_this_package(tiny_bert, shared_data, tmp_path, monkeypatch):
    other = tmp_path / "checkout"
    (other / "istar_plugin").mkdir(parents=True)
    (other / "istar_plugin" / "__init__.py").write_text('raise ImportError("the other checkout was imported")\n')
    monkeypatch.chdir(other)
    monkeypatch.setenv("PYTHONSAFEPATH", "")  # off, as in a fresh shell; restored after the test
    grid = grid_module.sweep([*tiny_arguments(tiny_bert, shared_data), "seed=1,2"])
    options, _ = parse(["launcher=local"])
    launched = launch(grid, tmp_path / "grid", plan(grid, tmp_path / "grid"), options)
    assert launched.statuses == {"seed=1": "finished", "seed=2": "finished"}
    assert os.environ["PYTHONSAFEPATH"] == "1"
