"""A grid cell is run by one istar-grid invocation at a time: a cell another process holds is left to it (neither run
nor recorded as failed) and run once that process is gone; two concurrent invocations on one grid run every cell
exactly once and both keep their record in the manifest."""
import json
import os
import subprocess
import sys

import pytest

from istar_plugin.cli import grid as grid_cli
from istar_plugin.launch import grid as grid_module
from istar_plugin.launch.cell import attempts
from istar_plugin.launch.options import parse
from istar_plugin.launch.submit import launch, plan, read_manifest
from helpers import lock_held_elsewhere, two_step_run_arguments


def grid_file(tiny_bert, shared_data, directory, seeds):
    """A grid of tiny cells (one per seed, 3 steps each) for istar-grid."""
    arguments = two_step_run_arguments(tiny_bert, shared_data, "max_steps=3")
    path = directory / "tiny.yaml"
    path.write_text("fixed:\n" + "".join(f"  {a.split('=', 1)[0]}: '{a.split('=', 1)[1]}'\n" for a in arguments)
                    + f"sweep:\n  seed: {list(seeds)}\n")
    return path


def test_a_cell_another_process_runs_is_left_to_it_neither_run_nor_failed(tiny_bert, shared_data, tmp_path, capsys):
    grid = grid_module.load(str(grid_file(tiny_bert, shared_data, tmp_path, [1, 2])))
    grid_dir = tmp_path / "grid"
    options, _ = parse(["launcher=inline"])
    planned = plan(grid, grid_dir)
    assert [p.status for p in planned] == ["pending", "pending"]
    with lock_held_elsewhere(grid_dir / "seed=1") as pid:  # it starts seed=1 after this invocation planned it
        launched = launch(grid, grid_dir, planned, options)
        assert launched.statuses == {"seed=1": "running in another invocation", "seed=2": "finished"}
        assert launched.failed == [] and not (grid_dir / "seed=1" / "results.json").exists()
        assert read_manifest(grid_dir)["cells"]["seed=1"]["status"] == "running in another invocation"
        command = [str(grid.source), "launcher=inline", f"grid_dir={grid_dir}"]
        capsys.readouterr()
        assert grid_cli.main(command) == 0  # planned while it is held: skipped as running, not started
        assert (f"0 cells finished, 0 failed, 1 skipped, 1 running in another invocation; manifest: "
                f"{grid_dir / 'manifest.json'}") in capsys.readouterr().out
        assert read_manifest(grid_dir)["submissions"][-1]["skipped"]["seed=1"].startswith(
            f"running in another invocation (host {os.uname().nodename}, pid {pid}, since ")
        assert attempts(grid_dir / "seed=1") == []
    assert grid_cli.main(command) == 0  # the other process is gone: this one runs it
    assert "1 cells finished, 0 failed, 1 skipped, 0 running in another invocation" in capsys.readouterr().out
    assert {name: entry["status"] for name, entry in read_manifest(grid_dir)["cells"].items()} == {
        "seed=1": "finished", "seed=2": "finished"}


@pytest.mark.slow  # two istar-grid processes, 3 tiny cells
def test_two_concurrent_invocations_run_every_cell_exactly_once(tiny_bert, shared_data, tmp_path):
    path = grid_file(tiny_bert, shared_data, tmp_path, [1, 2, 3])
    command = [sys.executable, "-m", "istar_plugin.cli.grid", str(path), "launcher=inline",
               f"grid_dir={tmp_path / 'grid'}"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    invocations = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=environment) for _ in range(2)]
    outputs = [invocation.communicate(timeout=600) for invocation in invocations]
    assert [invocation.returncode for invocation in invocations] == [0, 0], outputs
    assert not any("failed:" in out + err or "Traceback" in err for out, err in outputs), outputs
    summaries = [out.splitlines()[-1] for out, _ in outputs]
    counts = [[int(word) for word in summary.split(";")[0].replace(",", "").split() if word.isdigit()]
              for summary in summaries]  # finished, failed, skipped, running in another invocation
    assert sum(finished for finished, *_ in counts) == 3 and all(failed == 0 for _, failed, *_ in counts), summaries
    assert all(sum(count) == 3 for count in counts), summaries
    for seed in (1, 2, 3):
        cell = tmp_path / "grid" / f"seed={seed}"
        assert [a["event"] for a in attempts(cell)] == ["start", "finished"]
        assert json.loads((cell / "results.json").read_text())["step"] == 3
    assert {entry["status"] for entry in read_manifest(tmp_path / "grid")["cells"].values()} == {"finished"}
    assert len(read_manifest(tmp_path / "grid")["submissions"]) == 2  # neither invocation's record was lost
