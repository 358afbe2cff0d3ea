"""Golden files of the sbatch scripts submitted for a grid (no cluster needed); ISTAR_UPDATE_GOLDEN=1 rewrites them."""
import os
import sys
from pathlib import Path

import pytest

from istar_plugin.launch.grid import load
from istar_plugin.launch.options import load_profile
from istar_plugin.launch.submit import job_name, sbatch_script

GOLDEN = Path(__file__).parent / "golden"
GRID_DIR = Path("/GRID_DIR")  # stands for the absolute grid directory


def normalised(script: str) -> str:
    """The script with this machine's Python interpreter replaced by PYTHON."""
    return script.replace(sys.executable, "PYTHON")


@pytest.mark.parametrize("profile, grid, cells", [("local", "smoke", 4), ("gpu_a100", "paper", 1000)])
def test_sbatch_script_matches_its_golden_file(profile, grid, cells):
    script = normalised(sbatch_script(load_profile(profile), GRID_DIR / "submitit", job_name(load(grid)), cells))
    golden = GOLDEN / f"{profile}_{grid}.sbatch"
    if os.environ.get("ISTAR_UPDATE_GOLDEN") == "1":
        golden.write_text(script)
    assert script == golden.read_text()


def test_a_single_cell_is_a_plain_job_not_an_array():
    script = sbatch_script(load_profile("local"), GRID_DIR / "submitit", "istar-one", 1)
    assert "--array" not in script and "#SBATCH --output=/GRID_DIR/submitit/%j_0_log.out" in script
