"""A run talks when its output goes to a file (a SLURM log, a grid cell): progress lines, a summary, a rerun notice."""
import json
import re
import subprocess
import sys


def test_a_run_logged_to_a_file_reports_progress_and_summary_and_a_rerun_says_it_is_complete(tiny_bert, shared_data, tmp_path):
    run_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "istar_plugin.cli", "recipe=sst2", "model=minilm", f"model.name_or_path={tiny_bert}",
        "data.source=files", f"data.dir={shared_data / 'sst2'}", "data.max_train_samples=48", "data.max_eval_samples=16",
        "data.max_length=32", "batch_size=8", "optim.grad_accum=1", "optim.epochs=1", "log_every=2", "eval_every=4",
        "criterion=istar", "criterion.lam=-1", "criterion.shrinkage_points=300", "tensorboard=false", f"output_dir={run_dir}",
    ]
    with open(tmp_path / "log.txt", "w") as log:  # stdout and stderr to a file, as sbatch --output does
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)
    text = (tmp_path / "log.txt").read_text()
    steps = re.findall(r"^step (\d+)/6 \(\d+%\)  loss -?[\d.]+  penalty -?[\d.]+  batch IsoScore\* [\d.]+  lr [\d.e+-]+  "
                       r"[\d.]+ s/step  ETA \d+m?\d*s$", text, re.M)
    assert steps == ["2", "4", "6"]
    assert re.search(r"^Sigma_S \(epoch 0\): 300 points in [\d.]+ s, its IsoScore [\d.]+$", text, re.M)
    evals = re.findall(r"^eval (before training|at step \d/6): accuracy [\d.]+  eval IsoScore\* [\d.]+$", text, re.M)
    assert evals == ["before training", "at step 4/6", "at step 6/6"]
    assert "sst2 with minilm, criterion istar (lambda -1.0, zeta 0.2), seed 42" in text
    results = json.loads((run_dir / "results.json").read_text())
    assert f"after 6 steps:  accuracy = {results['accuracy']:.4f}" in text

    checkpoints = {path: path.stat().st_mtime_ns for path in (run_dir / "checkpoints").iterdir()}
    again = subprocess.run(command, capture_output=True, text=True, check=True)
    assert f"{run_dir}: already complete (6/6 steps, istar (lambda -1.0, zeta 0.2)); nothing to do" in again.stderr
    assert "step " not in again.stderr and "eval " not in again.stderr  # nothing trained or evaluated again
    assert {path: path.stat().st_mtime_ns for path in (run_dir / "checkpoints").iterdir()} == checkpoints
    assert json.loads((run_dir / "results.json").read_text()) == results
