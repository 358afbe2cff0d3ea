"""Grids of tiny-model cells through real submitit executors: the local executor, time-outs and requeues, skips, a
failed cell resubmitted alone, and jobs that run the code of the process starting them (a grid started beside another
checkout of istar_plugin, whose folder submitit's ``python -m`` would put first on ``sys.path``, runs its own
package)."""
import json
import os
import re
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from istar_plugin.cli import grid as grid_cli
from istar_plugin.cli import run as cli
from istar_plugin.hooks import Hook
from istar_plugin.launch import grid as grid_module
from istar_plugin.launch.cell import CellRunner, attempts
from istar_plugin.launch.options import parse
from istar_plugin.launch.submit import launch, plan, read_manifest
from helpers import tiny_run_arguments

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test hooks travel inside the job pickles


def tiny_arguments(tiny_bert, shared_data):
    """A 6-step run (48 examples, batch 8, 2 accumulated batches, 2 epochs) checkpointed after every step."""
    return tiny_run_arguments(tiny_bert, shared_data, "criterion=istar", "criterion.shrinkage_points=300",
                              "data.max_train_samples=48", "data.max_eval_samples=24", "optim.epochs=2",
                              "optim.lr=1e-3", "save_every=1", "tensorboard=false", "progress=")


class PauseOnce(Hook):
    """Stands for a slow step: once per run directory, after optimizer step ``step`` of the cell named ``cell``,
    sleep until the job is signalled (a time-out or preemption ends the sleep), at most ``limit_s`` seconds."""

    def __init__(self, cell, step=3, limit_s=300):
        self.cell, self.step, self.limit_s = cell, step, limit_s

    def on_step_end(self, trainer, step, stats):
        marker = trainer.output_dir / "paused"
        if trainer.output_dir.name == self.cell and step == self.step and not marker.exists():
            marker.write_text(str(step))
            deadline = time.monotonic() + self.limit_s
            while time.monotonic() < deadline:
                time.sleep(0.5)


class RecordWorld(Hook):
    """Writes what the Trainer saw of torch.distributed, one file per rank."""

    def on_fit_start(self, trainer):
        (trainer.output_dir / f"world.{trainer.rank}.json").write_text(
            json.dumps({"rank": trainer.rank, "world_size": trainer.world_size}))


@pytest.fixture(scope="module")
def timed_out_grid(tiny_bert, shared_data, tmp_path_factory):
    """Two identical cells but for their logging interval, on the local executor; the first is paused after step 3
    until its time limit (2 min, signal 60 s before: roomy for a slow start on a loaded machine) sends the
    time-out signal, so submitit requeues it."""
    grid = grid_module.sweep([*tiny_arguments(tiny_bert, shared_data), "log_every=1,2"])
    grid_dir = tmp_path_factory.mktemp("local_grid")
    options, _ = parse(["launcher=local", "local.parallelism=2", "local.timeout_min=2", "local.signal_delay_s=60",
                        "local.max_requeues=5"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        launched = launch(grid, grid_dir, plan(grid, grid_dir), options, runner=CellRunner([PauseOnce("log_every=1")]))
    return grid, grid_dir, options, launched


def results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


@pytest.mark.slow  # the timed_out_grid fixture: submitit's local executor, one cell waiting for its time-out
def test_local_executor_runs_every_cell_of_a_small_grid(timed_out_grid):
    grid, grid_dir, _, launched = timed_out_grid
    assert [cell.name for cell in grid.cells] == ["log_every=1", "log_every=2"]
    assert launched.statuses == {"log_every=1": "finished", "log_every=2": "finished"}
    manifest = read_manifest(grid_dir)
    for name in ("log_every=1", "log_every=2"):
        entry = manifest["cells"][name]
        assert entry["status"] == "finished" and entry["jobs"][0]["launcher"] == "local"
        assert entry["jobs"][0]["job_id"] == launched.jobs[name] and entry["swept"] == {"log_every": name[-1]}
        assert results(grid_dir / name)["step"] == 6
        assert (grid_dir / name / "cell.yaml").is_file()
    assert manifest["submissions"][0]["submitted"] == ["log_every=1", "log_every=2"]


@pytest.mark.slow
def test_a_cell_log_talks_progress_lines_and_ends_with_the_summary(timed_out_grid):
    _, grid_dir, _, launched = timed_out_grid
    job = launched.jobs["log_every=2"]
    err = (grid_dir / "submitit" / f"{job}_0_log.err").read_text()
    out = (grid_dir / "submitit" / f"{job}_0_log.out").read_text()
    assert re.findall(r"^step (\d+)/6 \(\d+%\)  loss -?[\d.]+ .* s/step  ETA ", err, re.M) == ["2", "4", "6"]
    assert re.search(r"^sst2 with minilm, criterion istar \(lambda [-\d.]+, zeta [\d.]+\), seed \d+\n"
                     r"before fine-tuning: .*\nafter 6 steps:  accuracy = [\d.]+", out, re.M)


@pytest.mark.slow
def test_cell_timed_out_is_requeued_and_resumes_from_its_checkpoint_to_the_same_result(timed_out_grid):
    _, grid_dir, _, _ = timed_out_grid
    interrupted, straight = grid_dir / "log_every=1", grid_dir / "log_every=2"
    starts = [a for a in attempts(interrupted) if a["event"] == "start"]
    assert len(starts) >= 2, "the paused cell should have been requeued after its time-out"
    assert starts[0]["resume_step"] == 0 and starts[-1]["resume_step"] >= 1  # resumed from a checkpoint
    assert all(a["executor"] == "local" for a in starts) and len({a["pid"] for a in starts}) == len(starts)
    assert [a["event"] for a in attempts(straight)] == ["start", "finished"]
    log = (grid_dir / "submitit").glob("*_0_log.err")
    assert any("timed-out" in path.read_text() for path in log)  # submitit's own account of the signal
    assert results(interrupted)["metrics"] == results(straight)["metrics"]
    assert results(interrupted)["history"] == results(straight)["history"]


@pytest.mark.slow
def test_resubmitting_the_grid_skips_finished_cells(timed_out_grid):
    grid, grid_dir, options, _ = timed_out_grid
    before = {name: len(attempts(grid_dir / name)) for name in ("log_every=1", "log_every=2")}
    planned = plan(grid, grid_dir)
    assert [p.status for p in planned] == ["finished", "finished"]
    again = launch(grid, grid_dir, planned, options)
    assert again.statuses == {} and again.jobs == {}
    assert {name: len(attempts(grid_dir / name)) for name in before} == before
    submission = read_manifest(grid_dir)["submissions"][-1]
    assert submission["submitted"] == [] and submission["skipped"] == {"log_every=1": "finished",
                                                                       "log_every=2": "finished"}


def test_failed_cell_is_resubmitted_alone_from_the_command_line(tiny_bert, shared_data, tmp_path, capsys):
    model = tmp_path / "model"  # not there yet: both cells fail
    arguments = [a if not a.startswith("model.name_or_path=") else f"model.name_or_path={model}"
                 for a in tiny_arguments(tiny_bert, shared_data)]
    grid_file = tmp_path / "two_seeds.yaml"
    grid_file.write_text("fixed:\n" + "".join(f"  {a.split('=', 1)[0]}: '{a.split('=', 1)[1]}'\n" for a in arguments)
                         + "  max_steps: 1\nsweep:\n  seed: [1, 2]\n")
    command = [str(grid_file), "launcher=inline", f"grid_dir={tmp_path / 'grid'}"]
    assert grid_cli.main(command) == 1
    failures = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  seed=")]
    assert len(failures) == 2 and all(f"model '{model}' cannot be loaded" in line for line in failures), failures
    assert all(line.endswith("no results.json (the run has not finished)") for line in failures)  # and why nothing more
    manifest = read_manifest(tmp_path / "grid")
    assert all(manifest["cells"][name]["status"].startswith("failed: ") for name in ("seed=1", "seed=2"))
    model.symlink_to(tiny_bert)  # the missing model arrives
    assert grid_cli.main([*command, "--cells", "seed=2"]) == 0
    assert (results(tmp_path / "grid" / "seed=2")["seed"] == 2
            and not (tmp_path / "grid" / "seed=1" / "results.json").exists())
    capsys.readouterr()
    assert grid_cli.main(command) == 0
    assert "1 cells finished, 0 failed, 1 skipped" in capsys.readouterr().out
    # failed once, then ran once
    assert [a["event"] for a in attempts(tmp_path / "grid" / "seed=2")].count("start") == 2


def test_a_failed_cell_s_reason_is_said_once(tiny_bert, shared_data, tmp_path, capsys):
    arguments = [*tiny_arguments(tiny_bert, shared_data), "max_steps=2", "optim.lr=1e6,1e7"]
    assert cli.main(["-m", *arguments, "launcher=inline", f"grid_dir={tmp_path}"]) == 1
    failures = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  lr=")]
    reason = "the loss became nan at step 2 (gradient norm nan)"
    assert [(line.count(reason), line.split(reason)[0]) for line in failures] == [(1, "  lr=1e6: failed: "),
                                                                                (1, "  lr=1e7: failed: ")]
    assert all(line.endswith("lower it (results.json status: failed)") for line in failures), failures


def test_a_local_cell_failed_before_its_results_says_the_run_s_error_and_its_log(tiny_bert, shared_data, tmp_path,
                                                                               capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    model = tmp_path / "model"  # not there: the cell fails as its model loads, before any results.json
    arguments = [a if not a.startswith("model.name_or_path=") else f"model.name_or_path={model}"
                 for a in tiny_arguments(tiny_bert, shared_data)]
    assert cli.main(["-m", *arguments, "launcher=local", f"grid_dir={tmp_path / 'grid'}"]) == 1
    job = read_manifest(tmp_path / "grid")["cells"]["default"]["jobs"][0]["job_id"]
    log = tmp_path / "grid" / "submitit" / f"{job}_0_log.err"
    error = f"model '{model}' cannot be loaded: "
    assert log.read_text().splitlines()[-1].startswith(f"istar_plugin.errors.ModelError: {error}")
    failures = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  default:")]
    assert len(failures) == 1 and failures[0].startswith(f"  default: failed: {error}"), failures
    assert failures[0].count(str(log)) == 1 and failures[0].count(error) == 1
    assert failures[0].endswith(f" (log {log}): no results.json (the run has not finished)"), failures
    assert read_manifest(tmp_path / "grid")["cells"]["default"]["status"].startswith(f"failed: {error}")


@pytest.mark.slow  # submitit's local executor starts two processes
def test_a_cell_with_two_tasks_trains_in_one_process_group(tiny_bert, shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    grid = grid_module.sweep([*tiny_arguments(tiny_bert, shared_data), "max_steps=2", "seed=1,2"]).select(["seed=1"])
    options, _ = parse(["launcher=local", "local.tasks_per_node=2", "local.timeout_min=5"])
    launched = launch(grid, tmp_path, plan(grid, tmp_path), options, runner=CellRunner([RecordWorld()]))
    assert launched.statuses == {"seed=1": "finished"}
    worlds = [json.loads((tmp_path / "seed=1" / f"world.{rank}.json").read_text()) for rank in (0, 1)]
    assert worlds == [{"rank": 0, "world_size": 2}, {"rank": 1, "world_size": 2}]
    assert results(tmp_path / "seed=1")["step"] == 2
    assert len([a for a in attempts(tmp_path / "seed=1") if a["event"] == "start"]) == 1  # rank 0 records, once


@pytest.mark.slow  # submitit's local executor runs two cells
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
