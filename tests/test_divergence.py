"""A run whose loss or gradient norm becomes non-finite stops at that step, before any evaluation of the diverged
model: exit 6 with one line naming the step and the likely cause, a failed results.json that istar-report lists as a
problem, no checkpoint from that step on; the guard spends fp16's overflow patience first."""
import json
from pathlib import Path

import pytest
import torch
from helpers import error_lines, four_step_run_arguments

from istar_plugin.config import compose
from istar_plugin.errors import DivergedError
from istar_plugin.reports.records import cells as istar_cells
from istar_plugin.training.divergence_guard import NonFiniteGuard
from istar_plugin.training.trainer import Trainer


def test_a_diverged_run_exits_6_naming_the_step_and_is_reported_as_failed(tiny_bert, shared_data, tmp_path, istar_run):
    run = tmp_path / "grid" / "cell"
    done = istar_run(*four_step_run_arguments(tiny_bert, shared_data, run, "optim.lr=1e6", "save_every=1"))
    assert done.returncode == 6
    assert "Traceback" not in done.stderr
    [line] = error_lines(done.stderr)
    assert line.startswith("istar-run: error: the loss became nan at step 2 (gradient norm nan)")
    assert "likely cause: optim.lr=1000000.0 is far above fine-tuning rates" in line
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "failed" and results["reason"] == line.removeprefix("istar-run: error: ")
    assert "accuracy" not in results and "metrics" not in results and "eval_isoscore_star" not in results
    assert [p.name for p in (run / "checkpoints").glob("step_*.pt")] == ["step_00000001.pt"]  # none from step 2 on
    records, problems = istar_cells.collect(tmp_path / "grid")
    assert records == [] and [(Path(path).name, reason[:37]) for path, reason in problems] == [
        ("cell", "failed: the loss became nan at step 2")]


def test_divergence_with_istar_stops_before_any_evaluation_of_the_diverged_model(tiny_bert, shared_data, tmp_path):
    cfg = compose(four_step_run_arguments(tiny_bert, shared_data, tmp_path / "run", "criterion=istar",
                                          "criterion.lam=-1", "criterion.shrinkage_points=200", "optim.lr=1e6",
                                          "eval_every=1", "log_every=100"))
    with pytest.raises(DivergedError, match=r"at step 2 \(") as caught:
        Trainer(cfg).fit()
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r["step"] for r in history if "eval/accuracy" in r]
    assert evaluated == [0, 1]  # the step-2 evaluation (eval_every=1) never ran on the diverged weights
    assert json.loads((tmp_path / "run" / "results.json").read_text())["reason"] == str(caught.value)


def test_the_guard_names_the_first_non_finite_step_and_spends_the_fp16_patience():
    nan = torch.tensor(float("nan"))
    guard = NonFiniteGuard(torch.device("cpu"), patience=2)
    for step, loss in [(1, 0.5), (2, nan), (3, nan), (4, 0.4), (5, nan), (6, nan)]:
        guard.observe(step, torch.as_tensor(loss), torch.tensor(1.0))
    guard.check()  # two skipped steps at a time: within the patience
    guard.observe(7, nan, torch.tensor(1.0))
    with pytest.raises(DivergedError, match=r"^the loss became nan at step 5 \(gradient norm 1.0\) and stayed "
                                            r"non-finite for more than optim.overflow_patience=2 steps"):
        guard.check()
    infinite_norm = NonFiniteGuard(torch.device("cpu"))
    infinite_norm.observe(1, torch.tensor(0.25), torch.tensor(float("inf")))
    with pytest.raises(DivergedError, match=r"^the gradient norm became inf at step 1 \(loss 0.25\)"):
        infinite_norm.check()
