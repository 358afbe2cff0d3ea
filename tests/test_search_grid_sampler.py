"""istar-tune's ``sampler=grid``: a paper-style grid (every combination of the choices, once each) run by the same
search machinery as TPE. Its refusals (a range in the space, a budget beyond the grid), its default budget (the
grid's size), workers claiming distinct points and resuming a killed worker's point, and a real inline search over a
2 x 2 grid on the tiny BERT and the packaged movie snippets."""
import itertools

import optuna
import pytest
import yaml

from istar_plugin.cli import tune as cli
from istar_plugin.config.searches import load, read_search
from istar_plugin.launch.cell import attempts, load_snapshot
from istar_plugin.launch.study import claim_trial, open_search, sample
from istar_plugin.reports.records.cells import read_cell
from istar_plugin.storage.study_database import connect

FIXED = {"recipe": "movie_snippets", "criterion": "istar", "data.validation_split": 0.25}
GRID = {"criterion.lam": {"choices": [-0.1, 0.1]}, "criterion.zeta": {"choices": [0.2, 0.8]}}
PRODUCT = set(itertools.product([-0.1, 0.1], [0.2, 0.8]))


def write_search(folder, fixed=FIXED, space=GRID, **content):
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump({"fixed": fixed, "space": space, "sampler": "grid", **content}))
    return path


def point(values):
    return values["criterion.lam"], values["criterion.zeta"]


@pytest.mark.parametrize("space, content, arguments, line", [
    ({"criterion.lam": {"low": 0.1, "high": 10, "log": True, "sign": "both"}, "criterion.zeta": {"choices": [0.2]}},
     {}, [], "istar-tune: error: sampler=grid needs every dimension of the space to be a list of choices; "
             "space.criterion.lam is a range (0.1 to 10 in magnitude on a log scale, either sign): give it "
             "{choices: [...]}"),
    ({"criterion.lam": {"choices": [-1, -0.5, -0.1, 0.1, 0.5, 1]}, "criterion.zeta": {"choices": [0.2, 0.4, 0.6, 0.8]}},
     {"trials": 30}, [], "istar-tune: error: trials=30 exceeds the grid's 24 settings (6 x 4 choices); set trials=24 "
                         "or fewer"),
    (GRID, {}, ["trials=5"],
     "istar-tune: error: trials=5 exceeds the grid's 4 settings (2 x 2 choices); set trials=4 or fewer"),
    ({"criterion.lam": {"choices": list(range(1, 401))}, "criterion.zeta": {"choices": list(range(300))}}, {}, [],
     "istar-tune: error: the grid's 120000 settings (400 x 300 choices) exceed 100000 trials; set trials=100000 or "
     "fewer"),
])
def test_a_grid_over_a_range_or_beyond_its_size_is_one_line_and_writes_nothing(
        tmp_path, capsys, space, content, arguments, line):
    path = write_search(tmp_path, space=space, **content)
    code = cli.main([str(path), f"search_dir={tmp_path / 'search'}", "launcher=inline", *arguments])
    assert (code, capsys.readouterr().err.splitlines()) == (2, [line])
    assert not (tmp_path / "search").exists()


def test_the_grids_budget_is_its_size_unless_trials_names_fewer(tmp_path):
    space = {"criterion.lam": {"choices": [-1, 1]}, "criterion.zeta": {"choices": [0.2, 0.4, 0.8]}}
    path = write_search(tmp_path, space=space)
    assert load(str(path)).trials == 6
    assert load(str(path), ["trials=4"]).trials == 4
    tpe = tmp_path / "tpe.yaml"
    tpe.write_text(yaml.safe_dump({"fixed": FIXED, "space": space}))
    assert (load(str(tpe), ["sampler=grid"]).trials, load(str(tpe)).trials) == (6, 24)  # others keep their default
    spec = load(str(path))
    open_search(spec, tmp_path / "search")
    assert read_search(tmp_path / "search").trials == 6  # recorded, read back the same


def test_two_workers_claim_distinct_points_and_a_killed_workers_point_is_resumed_as_it_was(tmp_path):
    spec = load(str(write_search(tmp_path)))
    search_dir = tmp_path / "search"
    workers = [open_search(spec, search_dir, worker) for worker in (0, 1)]  # two workers' samplers, one study
    killed = claim_trial(workers[0], spec, search_dir)  # asked for, then its worker dies before sampling
    killed.release()
    claims = [claim_trial(workers[1], spec, search_dir)]
    assert (claims[0].trial.number, claims[0].resumed) == (0, True)
    claims += [claim_trial(workers[worker], spec, search_dir) for worker in (0, 1, 0)]
    points = [point(sample(claim.trial, spec)) for claim in claims]
    assert [c.trial.number for c in claims] == [0, 1, 2, 3] and set(points) == PRODUCT
    assert claim_trial(workers[1], spec, search_dir) is None  # the grid's 4 points: the budget spent
    claims[1].release()  # trial 1's worker dies after sampling: the other resumes it with its values
    resumed = claim_trial(workers[1], spec, search_dir)
    assert (resumed.trial.number, resumed.resumed, point(sample(resumed.trial, spec))) == (1, True, points[1])
    for claim in (claims[0], resumed, claims[2], claims[3]):
        workers[0].tell(claim.trial, 0.5)  # the grid's last point too: Optuna's sampler would stop the study, raising
        claim.release()
    assert [t.state for t in workers[0].trials] == [optuna.trial.TrialState.COMPLETE] * 4


def test_an_inline_grid_search_runs_every_point_once_then_compares_the_best_with_base(tmp_path, capsys, tiny_bert):
    fixed = {**FIXED, "model.name_or_path": str(tiny_bert), "data.max_train_samples": 32,
             "data.max_eval_samples": 8, "data.max_length": 32, "batch_size": 8, "optim.grad_accum": 1,
             "max_steps": 1, "eval_before_training": False, "criterion.shrinkage_points": 200, "progress": False}
    path = write_search(tmp_path, fixed=fixed, pruner="none")
    search_dir = tmp_path / "search"
    assert cli.main([str(path), f"search_dir={search_dir}", "launcher=inline", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (f"search s: 4 trials of seeds [1] in {search_dir}, sampler "
                                                       "grid, pruner none; 1 workers, launcher=inline")
    code = cli.main([str(path), f"search_dir={search_dir}", "launcher=inline"])
    out = capsys.readouterr().out
    assert code == 0, out
    spec = read_search(search_dir)
    study = optuna.load_study(study_name=spec.name, storage=connect(spec.storage_url(search_dir)))
    finished = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(study.trials) == len(finished) == 4
    assert sorted(point(t.params) for t in finished) == sorted(PRODUCT)  # each grid point exactly once
    assert "trials: 4 finished" in out and f"chosen: trial {study.best_trial.number} (" in out
    assert sorted(p.name for p in (search_dir / "final").iterdir() if p.is_dir() and p.name.startswith("setting=")) \
        == ["setting=baseline,seed=1", f"setting=trial{study.best_trial.number},seed=1"]
    for trial in finished:  # every trial's run is a grid cell: snapshotted, run by the cell runner, read as a cell
        run = search_dir / "trials" / f"{trial.number:04d}" / "seed=1"
        assert load_snapshot(run).output_dir == str(run)
        assert [event["event"] for event in attempts(run)] == ["start", "finished"]
        assert read_cell(run).validation == pytest.approx(100 * trial.value)
