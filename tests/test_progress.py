"""A run talks when its output goes to a file (a SLURM log, a grid cell): progress lines, a summary, a rerun notice.
``istar-run`` runs in this process; pytest's captured streams, like a file, are not a terminal."""
import json
import re

import pytest
import torch

from helpers import tiny_run_arguments

from istar_plugin.cli.run import main
from istar_plugin.training.progress import PhaseClock, run_summary
from istar_plugin.training.step import IntervalStatistics


def test_a_run_logged_to_a_file_reports_progress_and_summary_and_a_rerun_says_it_is_complete(
        tiny_bert, shared_data, tmp_path, capsys):
    run_dir = tmp_path / "run"
    arguments = tiny_run_arguments(
        tiny_bert, shared_data, "data.max_train_samples=48", "data.max_eval_samples=16", "optim.grad_accum=1",
        "optim.epochs=1", "log_every=2", "eval_every=4", "criterion=istar", "criterion.lam=-1",
        "criterion.shrinkage_points=300", "tensorboard=false", f"output_dir={run_dir}", "progress=")
    assert main(arguments) == 0
    captured = capsys.readouterr()
    text = captured.out + captured.err  # what sbatch --output would hold, the two streams one after the other
    steps = re.findall(r"^step (\d+)/6 \(\d+%\)  loss -?[\d.]+  penalty -?[\d.]+  batch IsoScore\* [\d.]+  "
                       r"lr [\d.e+-]+  [\d.]+ s/step  ETA \d+m?\d*s$", text, re.M)
    assert steps == ["2", "4", "6"]
    assert re.search(r"^Sigma_S \(epoch 0\): 300 points in [\d.]+ s, its IsoScore [\d.]+$", text, re.M)
    evals = re.findall(r"^eval (before training|at step \d/6): accuracy [\d.]+  eval IsoScore\* [\d.]+$", text, re.M)
    assert evals == ["before training", "at step 4/6", "at step 6/6"]
    assert "sst2 with minilm, criterion istar (lambda -1.0, zeta 0.2), seed 42" in text
    results = json.loads((run_dir / "results.json").read_text())
    assert f"after 6 steps:  accuracy = {results['accuracy']:.4f}" in text
    timed = re.search(r"^time (\d+)s: (.*)$", text, re.M)  # where the run's wall time went, by phase
    phases = dict(re.findall(r"([a-z ]+) ([\d.]+) s \(\d+%\)(?:, |$)", timed.group(2)))
    assert set(phases) == {"setup", "training", "evaluation", "hooks", "checkpoints", "model folder", "other"}
    assert sum(map(float, phases.values())) == pytest.approx(int(timed.group(1)), abs=0.6 + 0.05 * len(phases))
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    times = {key: value for record in logged for key, value in record.items() if key.startswith("time/")}
    assert set(times) == {f"time/{phase.replace(' ', '_')}" for phase in phases if phase != "other"}
    assert times["time/training"] > 0 and times["time/hooks"] > 0  # the steps and the Sigma_S pass

    checkpoints = {path: path.stat().st_mtime_ns for path in (run_dir / "checkpoints").iterdir()}
    assert main(arguments) == 0
    again = capsys.readouterr().err
    assert f"{run_dir}: already complete (6/6 steps, istar (lambda -1.0, zeta 0.2)); nothing to do" in again
    assert "step " not in again and "eval " not in again  # nothing trained or evaluated again
    assert {path: path.stat().st_mtime_ns for path in (run_dir / "checkpoints").iterdir()} == checkpoints
    assert json.loads((run_dir / "results.json").read_text()) == results


def test_the_summary_names_the_run_its_scores_and_a_collapse():
    summary = run_summary({"task": "rte", "model": "minilm", "criterion": {"name": "cross_entropy"}, "seed": 1,
                           "main_metric": "accuracy", "step": 70, "metrics": {"accuracy": 0.5271},
                           "eval_isoscore_star": 0.2012, "collapsed": True})
    assert summary == ("rte with minilm, criterion cross_entropy, seed 1\n"
                       "after 70 steps:  accuracy = 0.5271, eval IsoScore* = 0.2012\n"
                       "COLLAPSED: every evaluation prediction is one class (the metric is a constant predictor's)")


def test_the_phase_clock_charges_a_nested_phase_to_the_inner_one_only():
    clock = PhaseClock(now=iter([0.0, 0.0, 3.0, 4.0, 10.0, 12.0]).__next__)
    with clock("training"):
        with clock("evaluation"):
            pass
    assert clock.seconds == {"training": 9.0, "evaluation": 1.0}
    assert clock.line() == "time 12s: training 9.0 s (75%), evaluation 1.0 s (8%), other 2.0 s (17%)"


def test_an_interval_means_its_steps_statistics_on_device_and_on_host():
    interval = IntervalStatistics()
    interval.add({"loss": torch.tensor(1.0), "lr": 0.1})
    interval.add({"loss": torch.tensor(3.0), "lr": 0.3})
    means = interval.means(world_size=1)
    assert (means["loss"], round(means["lr"], 6), interval.steps) == (2.0, 0.2, 2)
