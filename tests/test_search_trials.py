"""istar-tune's search directory and its trials, without training (tests/test_search_workers.py trains): opening the
study (an unreachable database, a folder holding another search or files of the user's, a larger budget extending it),
values sampled within their declared range and sign, trials claimed once and a killed worker's trial resumed with its
values, evaluation on the held-out share of the training file, the final comparison's cells and when it may run, and
the dry run's plan and workers' sbatch script."""
import math
import re

import optuna
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_search_files import refused, write_search

from istar_plugin.cli import tune as cli
from istar_plugin.config.searches import Dimension, SearchError, SearchSpec, check, load, parse, read_search
from istar_plugin.launch.study import claim_trial, open_search, sample
from istar_plugin.launch.tune import final_grid, unfinished


REACH = ("check that the database server runs and is reachable from this machine, then start the search again "
         "(finished trials are kept, a stopped trial resumes)")


@pytest.mark.parametrize("url, code, line", [
    ("postgresql+pg8000://me:secret@127.0.0.1:9/none", 2, "istar-tune: error: storage "
     "'postgresql+pg8000://me:***@127.0.0.1:9/none' needs a database driver this Python lacks: pip install pg8000"),
    ("postgresql://nobody@127.0.0.1:9/none", 4, "istar-tune: error: cannot open the study's database "
     "'postgresql://nobody@127.0.0.1:9/none': ...Connection refused...; " + REACH),
    ("sqlite:////nonexistent-folder/x/study.db", 4, "istar-tune: error: cannot open the study's database "
     "'sqlite:////nonexistent-folder/x/study.db': unable to open database file; create its folder, or set storage= to "
     "a database that exists"),
    ("sqlite:///:memory:", 2, "istar-tune: error: storage 'sqlite:///:memory:' is an in-memory database, which ends "
     "with its process: a study must outlive it; give a file (sqlite:///PATH) or a server's URL"),
])
def test_an_unreachable_database_is_one_line_and_leaves_nothing_behind(tmp_path, capsys, url, code, line):
    path = write_search(tmp_path, storage=url)
    status, err = refused(capsys, path, f"search_dir={tmp_path / 'search'}", "launcher=inline")
    pattern = ".*".join(re.escape(part) for part in line.split("..."))  # the driver's own words vary by version
    assert status == code and len(err) == 1 and re.fullmatch(pattern, err[0]), err
    assert not (tmp_path / "search").exists()


def test_a_search_directory_holding_another_search_or_foreign_files_is_refused(tmp_path, capsys):
    path = write_search(tmp_path)
    spec = load(str(path))
    open_search(spec, tmp_path / "search")
    changed = load(str(path), ["final_seeds=[1,2]"])
    with pytest.raises(SearchError, match=r"holds another search \(s; differs at final_seeds\); choose another"):
        open_search(changed, tmp_path / "search")
    open_search(load(str(path), ["trials=40"]), tmp_path / "search")  # a larger budget extends the search
    assert read_search(tmp_path / "search").trials == 40
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    code, err = refused(capsys, path, f"search_dir={tmp_path / 'mine'}", "launcher=inline")
    assert code == 4 and err == [f"istar-tune: error: search_dir {tmp_path / 'mine'}: exists and holds files "
                                 "istar_plugin did not write (notes.txt); choose a new or empty search_dir, nothing "
                                 "was changed"]
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


@given(low=st.floats(1e-4, 1.0), span=st.floats(1.5, 1e3), sign=st.sampled_from(["positive", "negative", "both"]),
       seed=st.integers(0, 2 ** 16))
def test_sampled_values_lie_in_the_declared_range_with_the_declared_sign(low, span, sign, seed):
    spec = SearchSpec("h", ("recipe=rte",), (Dimension("criterion.lam", low, low * span, log=True, sign=sign),))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    value = sample(study.ask(), spec)["criterion.lam"]
    assert low * (1 - 1e-12) <= abs(value) <= low * span * (1 + 1e-12)
    assert {"positive": value > 0, "negative": value < 0, "both": True}[sign]


def test_a_killed_workers_trial_is_resumed_with_its_values_and_the_budget_counts_every_trial(tmp_path):
    spec = load(str(write_search(tmp_path)), ["trials=2"])
    study = open_search(spec, tmp_path / "search")
    first = claim_trial(study, spec, tmp_path / "search")
    values = sample(first.trial, spec)
    second = claim_trial(study, spec, tmp_path / "search")  # trial 0 is held: a new trial
    assert (first.trial.number, second.trial.number) == (0, 1)
    assert claim_trial(study, spec, tmp_path / "search") is None  # both held, the budget spent
    first.release()  # its worker dies: the OS drops the lock
    resumed = claim_trial(study, spec, tmp_path / "search")
    assert (resumed.trial.number, resumed.resumed, sample(resumed.trial, spec)) == (0, True, values)
    assert unfinished(study, spec) == 2
    study.tell(resumed.trial, 0.7)
    study.tell(second.trial, state=optuna.trial.TrialState.PRUNED)
    resumed.release()
    second.release()
    assert unfinished(study, spec) == 0 and claim_trial(study, spec, tmp_path / "search") is None


def test_the_final_comparison_needs_a_finished_trial_and_runs_the_best_and_the_baseline(tmp_path):
    spec = load(str(write_search(tmp_path)), ["final_seeds=[1,2,3]"])
    study = open_search(spec, tmp_path / "search")
    claim = claim_trial(study, spec, tmp_path / "search")
    sample(claim.trial, spec)
    study.tell(claim.trial, state=optuna.trial.TrialState.FAIL)
    with pytest.raises(SearchError, match=r"no trial of search s finished \(1 fail\): there is no setting to compare"):
        final_grid(spec, study)
    for score in (0.6, 0.8, 0.7):
        claim = claim_trial(study, spec, tmp_path / "search") or pytest.fail("budget")
        values = sample(claim.trial, spec)
        study.tell(claim.trial, score)
        best = values if score == 0.8 else locals().get("best")
    grid = final_grid(spec, study)
    assert [cell.name for cell in grid.cells] == [f"setting={s},seed={seed}" for seed in (1, 2, 3)
                                                  for s in ("trial2", "baseline")]
    chosen = dict(a.split("=", 1) for a in grid.cells[0].arguments)
    assert math.isclose(float(chosen["criterion.lam"]), best["criterion.lam"]) and chosen["seed"] == "1"
    assert grid.cells[1].arguments[-2:] == ("criterion=cross_entropy", "seed=1")


def test_the_dry_run_prints_the_plan_and_the_workers_sbatch_script_and_writes_nothing(tmp_path, capsys):
    path = write_search(tmp_path, trials=6)
    assert cli.main([str(path), f"search_dir={tmp_path / 'search'}", "slurm=local", "workers=3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"search s: 6 trials of seeds [1] in {tmp_path / 'search'}, sampler tpe, pruner median; "
                          "3 workers, launcher=slurm\n")
    assert "  criterion.lam: 0.1 to 10 in magnitude on a log scale, either sign\n" in out
    assert "#SBATCH --array=0-2%" in out and "submitit.core._submit" in out
    assert not (tmp_path / "search").exists()


def test_a_held_out_evaluation_reads_the_training_file_alone_and_scores_the_validation_share(shared_data, tmp_path):
    from istar_plugin.config import compose
    from istar_plugin.config.views import data_config
    from istar_plugin.data.packaged import seeded_split
    from istar_plugin.registry import TASKS

    only_train = tmp_path / "sst2"
    only_train.mkdir()
    (only_train / "train.tsv").write_text((shared_data / "sst2" / "train.tsv").read_text())
    arguments = ["recipe=sst2", "data.source=files", f"data.dir={only_train}", "data.max_train_samples=40",
                 "data.validation_split=0.25"]
    task = TASKS.build("sst2", data_config(compose([*arguments, "data.eval_split=held_out"])))
    train = task.load("train")
    assert task.load("eval") == seeded_split(train, 0.25, 0)[1] and len(task.load("eval")) == 10
    assert task.source_of("eval") == f"{only_train / 'train.tsv'} (held out: data.validation_split=0.25, " \
                                     "data.split_seed=0)"
    with pytest.raises(Exception, match="dev"):  # the evaluation split proper is missing here
        TASKS.build("sst2", data_config(compose(arguments))).load("eval")
    with pytest.raises(Exception, match=r"data.eval_split=held_out evaluates on the share of the training set that "
                                        r"data.validation_split holds out: set data.validation_split \(e.g. 0.1\)"):
        compose(["recipe=sst2", "data.eval_split=held_out"])


def test_the_final_comparison_waits_for_every_trial_to_end(tmp_path, capsys):
    path = write_search(tmp_path, trials=2)
    spec = load(str(path))
    study = open_search(spec, tmp_path / "search")
    claim = claim_trial(study, spec, tmp_path / "search")  # running in another worker
    sample(claim.trial, spec)
    code, err = refused(capsys, path, f"search_dir={tmp_path / 'search'}", "launcher=inline", "--final")
    assert (code, err) == (2, ["istar-tune: error: 2 of the 2 trials have not ended (running elsewhere, or their "
                               "workers stopped): run istar-tune " + str(path) + " again to resume them, then --final"])
    claim.release()
    assert not (tmp_path / "search" / "final").exists()


def test_trial_pruning_stops_a_run_the_pruner_prunes_but_never_the_last_run_at_its_end():
    from istar_plugin.hooks import TrainingControl
    from istar_plugin.launch.trial import TrialPruning

    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=0.5))
    hook = TrialPruning(study.ask(), "accuracy", seed_index=1)

    class View:
        step, total_steps, control = 40, 60, TrainingControl()

    view = View()
    hook.on_validation(view, 0, {"accuracy": 0.4})
    assert hook.pruned_at == 40
    assert view.control.stop_reason == ("pruned by the search: validation accuracy 0.4000 at step 40 "
                                        "(trial 0, seed index 1)")
    last = TrialPruning(study.ask(), "accuracy", last_seed=True)
    view.step = 60
    last.on_validation(view, 2, {"accuracy": 0.4})
    assert last.pruned_at is None


def test_a_search_spells_its_trials_values_arguments_and_folders():
    from pathlib import Path

    from istar_plugin.config.searches import (
        baseline_arguments,
        describe_values,
        grid_size,
        trial_arguments,
        trial_dir,
        yaml_value,
    )

    spec = parse({"fixed": {"recipe": "movie_snippets", "data.validation_split": 0.25}, "trials": 4,
                  "space": {"criterion.lam": {"low": 0.1, "high": 10, "log": True, "sign": "both"}}}, name="demo")
    assert (spec.space[0].corners(), spec.trials, spec.seeds, spec.final_seeds) == ([-10.0, -0.1, 0.1, 10.0], 4, (1,),
                                                                                     (1,))
    check(spec)
    assert spec.storage_url(Path("/tmp/s")) == "sqlite:////tmp/s/study.db"
    grid = parse({"fixed": {"recipe": "movie_snippets"}, "sampler": "grid",
                  "space": {"criterion.lam": {"choices": [-1, -0.1]}, "criterion.zeta": {"choices": [0.2, 0.4, 0.8]}}},
                 name="demo")
    assert (grid.trials, grid_size(grid.space)) == (6, (6, "2 x 3 choices"))
    assert Dimension("criterion.lam", 0.1, 5, log=True, sign="both").describe() == (
        "0.1 to 5 in magnitude on a log scale, either sign")
    texts = ("8", "[1,2]", "sqlite:///a.db", "[1,")
    assert [yaml_value(text) for text in texts] == [8, [1, 2], "sqlite:///a.db", "[1,"]
    assert describe_values({"criterion.lam": -0.316227766, "criterion.zeta": 0.8, "optim.epochs": 2}) == (
        "criterion.lam=-0.3162, criterion.zeta=0.8, optim.epochs=2")
    assert trial_dir(Path("runs/searches/s"), 7) == Path("runs/searches/s/trials/0007")
    spec = SearchSpec("s", ("recipe=rte",), (Dimension("optim.lr", 1e-5, 1e-4),))
    assert trial_arguments(spec, {"optim.lr": 3e-05}, seed=2) == ["recipe=rte", "optim.lr=3e-05", "seed=2"]
    spec = SearchSpec("s", ("recipe=rte", "criterion=istar", "criterion.padding=include"), ())
    assert baseline_arguments(spec, seed=3) == ["recipe=rte", "criterion=istar", "criterion=cross_entropy", "seed=3"]
