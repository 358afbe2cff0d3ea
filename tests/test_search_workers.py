"""istar-tune with real workers training a tiny BERT: two local workers on one SQLite study (no trial twice, the
database and the run directories agree, then the final comparison), a worker killed mid-trial and restarted (the
trial resumes from its checkpoint; Optuna's journal file as the study), pruning and failing trials."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import optuna
import pytest
import yaml
from helpers import tiny_run_arguments

from istar_plugin.cli import tune as cli
from istar_plugin.config.searches import load, read_search, trial_dir
from istar_plugin.launch.cell import latest_checkpoint_step
from istar_plugin.launch.study import claim_trial, open_search, sample
from istar_plugin.launch.trial import SearchWorker, TrialFailed, run_trial
from istar_plugin.storage.results import read_results
from istar_plugin.storage.study_database import connect

pytestmark = pytest.mark.slow


def write_search(folder, tiny_bert, shared_data, *overrides, **content):
    """A search over I-STAR's lambda and zeta on the tiny BERT (24 training sentences, 8 held out)."""
    fixed = dict(argument.split("=", 1) for argument in tiny_run_arguments(
        tiny_bert, shared_data, "criterion=istar", "data.validation_split=0.25", "optim.epochs=2",
        "eval_before_training=false", "criterion.shrinkage_points=200", *overrides))
    path = folder / "search.yaml"
    path.write_text(yaml.safe_dump({"fixed": fixed, "space": {
        "criterion.lam": {"low": 0.01, "high": 1, "log": True, "sign": "both"},
        "criterion.zeta": {"choices": [0.2, 0.8]}}, **content}))
    return path


def progress(search_dir):
    return (search_dir / "progress.log").read_text().splitlines()


def study_of(search_dir):
    spec = read_search(search_dir)
    return spec, optuna.load_study(study_name=spec.name, storage=connect(spec.storage_url(search_dir)))


def assert_study_and_directories_agree(search_dir, trials):
    spec, study = study_of(search_dir)
    finished = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert sorted(t.number for t in study.trials) == list(range(trials))
    assert sorted(p.name for p in (search_dir / "trials").iterdir()) == [f"{n:04d}" for n in range(trials)]
    for trial in finished:
        results = read_results(trial_dir(search_dir, trial.number) / "seed=1" / "results.json", require_finished=True)
        assert results.validation["best"] == trial.user_attrs["scores"]["1"] == trial.value
        assert results.criterion["lam"] == pytest.approx(trial.user_attrs["values"]["criterion.lam"])
        record = json.loads((trial_dir(search_dir, trial.number) / "seed=1" / "results.json").read_text())
        assert record["data"]["eval"]["source"].endswith("(held out: data.validation_split=0.25, data.split_seed=0)")
    return study


def test_two_local_workers_share_one_sqlite_study_run_no_trial_twice_then_compare_with_base(
        tiny_bert, shared_data, tmp_path, capsys):
    path = write_search(tmp_path, tiny_bert, shared_data, trials=4, pruner="none", final_seeds=[1])
    search_dir = tmp_path / "search"
    code = cli.main([str(path), f"search_dir={search_dir}", "launcher=local", "local.parallelism=2"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = progress(search_dir)
    started = sorted(line.split(": trial ")[1].split()[0] for line in lines if " started: " in line)
    assert started == ["0", "1", "2", "3"]  # every trial started once, by one worker
    assert {line.split(" worker ")[1][0] for line in lines} == {"0", "1"}  # both workers pulled trials
    study = assert_study_and_directories_agree(search_dir, 4)
    assert "trials: 4 finished" in out and f"chosen: trial {study.best_trial.number} (" in out
    chosen = search_dir / "final" / f"setting=trial{study.best_trial.number},seed=1"
    for cell in (chosen, search_dir / "final" / "setting=baseline,seed=1"):
        record = json.loads((cell / "results.json").read_text())  # finished, scored on the 8 evaluation sentences
        assert record["status"] == "finished" and record["data"]["eval"]["examples"] == 8
    assert read_results(search_dir / "final" / "setting=baseline,seed=1" / "results.json").criterion == {
        "name": "cross_entropy"}
    # started again: nothing left to run, the final cells are found finished
    assert cli.main([str(path), f"search_dir={search_dir}", "launcher=inline"]) == 0
    again = capsys.readouterr().out
    assert "trials: none run now" in again and len(study_of(search_dir)[1].trials) == 4
    assert f"final: 0 cells finished now, 2 before, 0 failed; istar-report {search_dir} compares them" in again


def test_a_worker_killed_mid_trial_is_restarted_and_its_trial_resumes_from_the_checkpoint(
        tiny_bert, shared_data, tmp_path, capfd):
    path = write_search(tmp_path, tiny_bert, shared_data, "optim.epochs=12", "save_every=1", "progress=true",
                        trials=2, pruner="none", storage=f"journal:{tmp_path / 'study.journal'}")
    search_dir = tmp_path / "search"
    open_search(load(str(path)), search_dir)
    worker = subprocess.Popen([sys.executable, "-c", "import sys; from istar_plugin.launch.trial import SearchWorker; "
                               "SearchWorker()(sys.argv[1], 0)", str(search_dir)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    run_dir = trial_dir(search_dir, 0) / "seed=1"
    deadline = time.monotonic() + 300
    while latest_checkpoint_step(run_dir) < 2:  # a whole checkpoint, not one being written
        assert worker.poll() is None, worker.stderr.read().decode()
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    capfd.readouterr()
    _, study = study_of(search_dir)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.RUNNING]
    assert not (run_dir / "results.json").exists()
    counts = SearchWorker()(str(search_dir), 1)  # restarted
    assert counts == {"finished": 2}
    lines = progress(search_dir)
    assert [line.split(": ", 1)[1].split(":")[0] for line in lines if "trial 0" in line][:2] == [
        "trial 0 started", "trial 0 resumed"]
    err = capfd.readouterr().err.splitlines()
    resumed = [line for line in err if line.startswith(f"resuming {run_dir} from step ")]
    assert len(resumed) == 1 and int(resumed[0].split("from step ")[1].split()[0]) >= 1, "\n".join(err)
    assert_study_and_directories_agree(search_dir, 2)


def test_a_pruned_trial_stops_after_its_epoch_and_a_refused_one_is_recorded_failed(tiny_bert, shared_data, tmp_path):
    spec = load(str(write_search(tmp_path, tiny_bert, shared_data, "optim.epochs=3")))
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=2.0))
    trial = study.ask()
    with pytest.raises(optuna.TrialPruned, match="seed 1 at step 2"):
        run_trial(spec, tmp_path, trial, sample(trial, spec))
    results = read_results(trial_dir(tmp_path, 0) / "seed=1" / "results.json", require_finished=True)
    assert results.step == 2 and list(study.trials[0].intermediate_values) == [2]  # stopped after the first epoch
    record = json.loads((trial_dir(tmp_path, 0) / "seed=1" / "results.json").read_text())
    stopped = record["stopped"]  # the score itself depends on the machine's precision (bf16 where the CPU has it)
    assert (stopped["step"], stopped["epoch"]) == (2, 1) and re.fullmatch(
        r"pruned by the search: validation accuracy 0\.\d{4} at step 2 \(trial 0, seed index 0\)", stopped["reason"])
    assert record["search_trial"] == {"trial": 0, "pruned_at_step": 2}
    failing = load(str(write_search(tmp_path, tiny_bert, shared_data, f"data.dir={tmp_path / 'no_data'}")))
    trial = study.ask()
    with pytest.raises(TrialFailed, match="no_data"):
        run_trial(failing, tmp_path, trial, sample(trial, failing))


def test_the_study_records_a_failed_trial_with_its_reason_not_a_score(tiny_bert, shared_data, tmp_path):
    model = shutil.copytree(tiny_bert, tmp_path / "model")
    path = write_search(tmp_path, str(model), shared_data, "max_steps=1", trials=1)
    spec = load(str(path))
    search_dir = tmp_path / "search"
    study = open_search(spec, search_dir)  # fingerprints the data: a missing data folder is refused here, before
    (model / "config.json").unlink()  # so the trial fails, on its model
    assert SearchWorker()(str(search_dir)) == {"failed": 1}
    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.FAIL and trial.value is None
    assert str(model) in trial.user_attrs["failure"]
    assert claim_trial(study, spec, search_dir) is None


def test_a_trial_that_max_steps_ends_within_an_epoch_is_scored_on_its_held_out_split(tiny_bert, shared_data, tmp_path):
    spec = load(str(write_search(tmp_path, tiny_bert, shared_data, "max_steps=1")))  # 2 steps an epoch: stops in it
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    score = run_trial(spec, tmp_path, trial, sample(trial, spec))
    record = json.loads((trial_dir(tmp_path, 0) / "seed=1" / "results.json").read_text())
    assert record["step"] == 1 and [r["step"] for r in record["validation"]["history"]] == [1]
    assert score == record["validation"]["best"] and list(trial.study.trials[0].intermediate_values) == [1]
