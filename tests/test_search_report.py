"""istar-report SEARCH_DIR on search directories made here without training: the study written with Optuna (trials
finished, pruned, failed and running, with the attributes istar-tune records), minimal run directories for the trials
and the final grid's cells, so that every score, difference and disagreement is known by construction."""
import contextlib
import csv
import datetime
import io
import json

import optuna
import pytest
import yaml

from istar_plugin.cli import report as report_cli
from istar_plugin.config.searches import parse
from istar_plugin.reports import search_report
from istar_plugin.reports.records import searches
from istar_plugin.storage.ownership import SEARCH_MARKER, mark

SPEC = parse({"fixed": {"recipe": "sst2", "model": "minilm", "criterion": "istar", "data.validation_split": 0.25},
              "space": {"criterion.lam": {"low": 0.01, "high": 3, "log": True, "sign": "both"},
                        "criterion.zeta": {"choices": [0.2, 0.8]}},
              "seeds": [1, 2], "trials": 8, "final_seeds": [1, 2]}, name="demo")
DISTRIBUTIONS = {"criterion.lam (magnitude)": optuna.distributions.FloatDistribution(0.01, 3, log=True),
                 "criterion.lam (sign)": optuna.distributions.CategoricalDistribution([-1, 1]),
                 "criterion.zeta": optuna.distributions.CategoricalDistribution([0.2, 0.8])}
START = datetime.datetime(2026, 1, 1, 12, 0, 0)
FINISHED, PRUNED, FAILED, RUNNING = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
                                     optuna.trial.TrialState.FAIL, optuna.trial.TrialState.RUNNING)
TRIALS = [  # state, lam, zeta, held-out accuracy per seed, intermediate values, failure, minutes from START, seconds
    (FINISHED, -0.5, 0.2, {1: 0.60, 2: 0.64}, {15: 0.60, 10 ** 6 + 15: 0.64}, None, 0, 90),
    (FINISHED, 0.25, 0.8, {1: 0.70, 2: 0.74}, {15: 0.70, 10 ** 6 + 15: 0.74}, None, 2, 120),
    (PRUNED, 2.0, 0.2, {1: 0.58}, {15: 0.55, 30: 0.58, 10 ** 6 + 15: 0.45}, None, 5, 60),
    (FAILED, -0.02, 0.8, {}, {}, "the loss became nan at step 3", 7, 30),
    (FINISHED, 0.1, 0.8, {1: 0.70, 2: 0.72}, {15: 0.70, 10 ** 6 + 15: 0.72}, None, 8, 96),
    (RUNNING, 0.3, 0.2, {}, {}, None, 50, None),
]
optuna.logging.set_verbosity(optuna.logging.WARNING)  # the studies built here, quietly (as istar-tune's are)
FINAL = {"trial1": {1: 0.80, 2: 0.84}, "baseline": {1: 0.78, 2: 0.80}}  # held-out accuracy on the evaluation split


def frozen(number, state, lam, zeta, scores, intermediate, failure, minutes, seconds):
    start = START + datetime.timedelta(minutes=minutes)
    attrs = {"values": {"criterion.lam": lam, "criterion.zeta": zeta}, "scores": {str(s): v for s, v in scores.items()},
             **({"failure": failure} if failure else {})}
    return optuna.trial.FrozenTrial(
        number=number, state=state, value=sum(scores.values()) / len(scores) if state == FINISHED else None,
        datetime_start=start,
        datetime_complete=None if seconds is None else start + datetime.timedelta(seconds=seconds),
        params={"criterion.lam (magnitude)": abs(lam), "criterion.lam (sign)": 1 if lam > 0 else -1,
                "criterion.zeta": zeta},
        distributions=DISTRIBUTIONS, user_attrs=attrs, system_attrs={}, intermediate_values=intermediate, trial_id=0)


def write_run(directory, seed, criterion, accuracy, **extra):
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(f"task: sst2\nseed: {seed}\n")
    results = {"task": "sst2", "model": "minilm", "seed": seed, "step": 30, "epoch": 2, "criterion": criterion,
               "main_metric": "accuracy", "accuracy": accuracy, "metrics": {"accuracy": accuracy,
                                                                            "eval_isoscore_star": 0.2},
               "eval_isoscore_star": 0.2, "initial": None, "history": [], **extra}
    (directory / "results.json").write_text(json.dumps(results))


def build(root, trials=TRIALS, final=FINAL):
    """A search directory as istar-tune leaves it: marker, search.yaml, study.db, trials/NNNN/seed=S, final/."""
    root.mkdir(parents=True, exist_ok=True)
    mark(root, SEARCH_MARKER, search=SPEC.name)
    (root / "search.yaml").write_text(yaml.safe_dump({"name": SPEC.name, **SPEC.as_dict()}, sort_keys=False))
    study = optuna.create_study(study_name=SPEC.name, storage=SPEC.storage_url(root), direction="maximize")
    for number, (state, lam, zeta, scores, intermediate, failure, minutes, seconds) in enumerate(trials):
        study.add_trial(frozen(number, state, lam, zeta, scores, intermediate, failure, minutes, seconds))
        for seed in ((1,) if state in (FAILED, RUNNING) else SPEC.seeds):
            run = root / "trials" / f"{number:04d}" / f"seed={seed}"
            if state == RUNNING:
                run.mkdir(parents=True)
                continue
            write_run(run, seed, {"name": "istar", "lam": lam, "zeta": zeta}, 0.5,
                      validation={"best": scores.get(seed, 0.45), "metric": "accuracy"},
                      search_trial={"trial": number, "pruned_at_step": 15 if state == PRUNED and seed == 2 else None},
                      **({"status": "failed", "error": failure} if state == FAILED else {}))
    for setting, scores in final.items():
        lam, zeta = (None, None) if setting == "baseline" else (0.25, 0.8)
        criterion = {"name": "cross_entropy"} if setting == "baseline" else {"name": "istar", "lam": lam, "zeta": zeta}
        for seed, accuracy in scores.items():
            write_run(root / "final" / f"setting={setting},seed={seed}", seed, criterion, accuracy)
    return root


def rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """The search reported once (capsys is per test): search dir, report dir, stdout, stderr, exit code."""
    root = build(tmp_path_factory.mktemp("searches") / "demo")
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = report_cli.main([str(root)])
    return root, root / "report", out.getvalue(), err.getvalue(), code


def test_a_search_directory_is_reported_as_a_search_with_its_summary(reported):
    root, out, stdout, stderr, code = reported
    assert code == 0 and stderr == ""
    assert stdout.splitlines() == [
        "search demo: 6 of 8 trials (3 finished, 1 pruned, 1 failed, 1 running)",
        "running: trial 5 (since 2026-01-01 12:50)",
        "chosen: trial 1 (criterion.lam=0.25, criterion.zeta=0.8), held-out accuracy 72.00",
        "final on the evaluation split, trial1 - baseline paired by seed (seeds 1, 2): +3.00 [+2.00, +4.00] better "
        "(accuracy points; resampled seeds)",
        "final: 4 cells finished, 0 missing or failed",
        f"report in {out}"]
    assert sorted(path.name for path in out.iterdir()) == [
        ".istar-report", "chosen.csv", "chosen.md", "final", "history.png", "importances.png", "problems.csv",
        "problems.md", "trials.csv", "trials.md"]
    assert json.loads((out / ".istar-report").read_text())["search"] == str(root.resolve())


def test_every_trial_is_listed_with_its_state_values_scores_and_runs(reported):
    root, out, *_ = reported
    table = rows(out / "trials.csv")
    assert list(table[0]) == ["trial", "state", "criterion.lam", "criterion.zeta", "held_out", "seed=1", "seed=2",
                              "pruned_seed", "pruned_step", "failure", "runs", "wall_s", "penalised_isoscore"]
    assert [(row["trial"], row["state"], row["criterion.lam"], row["held_out"], row["seed=1"], row["seed=2"])
            for row in table] == [
        ("0", "finished", "-0.5", "62.0", "60.0", "64.0"), ("1", "finished", "0.25", "72.0", "70.0", "74.0"),
        ("2", "pruned", "2.0", "", "58.0", ""), ("3", "failed", "-0.02", "", "", ""),
        ("4", "finished", "0.1", "71.0", "70.0", "72.0"), ("5", "running", "0.3", "", "", "")]
    assert [(row["pruned_seed"], row["pruned_step"], row["failure"], row["wall_s"]) for row in table[1:4]] == [
        ("", "", "", "120.0"), ("2", "15", "", "60.0"), ("", "", "the loss became nan at step 3", "30.0")]
    assert table[0]["runs"] == "trials/0000/seed=1 trials/0000/seed=2" and table[5]["wall_s"] == ""
    lines = (out / "trials.md").read_text().splitlines()
    assert lines[0] == ("Search demo: 6 trials of 8 (3 finished, 1 pruned, 1 failed, 1 running), each scored on the "
                        "accuracy of the split held out of the training set (percent; held-out: the mean over seeds "
                        "[1, 2]; higher is better).")
    assert lines[2] == ("| trial | state | criterion.lam | criterion.zeta | held-out accuracy | seed 1 | seed 2 | "
                        "pruned at | failure | run directories | wall min |")
    assert lines[6] == "| 2 | pruned | 2 | 0.2 | — | 58.00 | — | seed 2, step 15 | — | trials/0002/seed=1 " \
                       "trials/0002/seed=2 | 1.0 |"
    assert lines[7] == "| 3 | failed | -0.02 | 0.8 | — | — | — | — | the loss became nan at step 3 | " \
                       "trials/0003/seed=1 | 0.5 |"
    assert lines[9] == "| 5 | running | 0.3 | 0.2 | — | — | — | — | — | trials/0005/seed=1 | — |"


def test_the_chosen_setting_is_paired_with_the_baseline_as_the_final_grid_report_pairs_it(reported):
    root, out, *_ = reported
    chosen, baseline = rows(out / "chosen.csv")
    assert chosen == {"setting": "trial1", "chosen": "True", "values": "criterion.lam=0.25, criterion.zeta=0.8",
                      "held_out": "72.0", "metric": "accuracy", "seed=1": "80.0", "seed=2": "84.0", "mean": "82.0",
                      "paired_seeds": "2", "difference": "3.0", "low": "2.0", "high": "4.0", "verdict": "better",
                      "resampled": "seeds"}
    assert (baseline["setting"], baseline["values"], baseline["seed=1"], baseline["seed=2"], baseline["difference"]) \
        == ("baseline", "criterion=cross_entropy", "78.0", "80.0", "")
    (grid_row,) = rows(out / "final" / "versus_base.csv")  # the final grid's own report: the same comparison
    assert [grid_row[key] for key in ("difference", "low", "high", "verdict")] == ["3.0", "2.0", "4.0", "better"]
    lines = (out / "chosen.md").read_text().splitlines()
    assert lines[0].startswith("Chosen: trial 1 (criterion.lam=0.25, criterion.zeta=0.8), held-out accuracy 72.00, "
                               "the best of 3 finished trials (3 finished, 1 pruned, 1 failed, 1 running; the choice "
                               "may change).")
    assert lines[4:] == [
        "| trial1 (chosen) | criterion.lam=0.25, criterion.zeta=0.8 | 72.00 | 80.00 | 84.00 | 82.00 | +3.00 | "
        "[+2.00, +4.00] | better | seeds |",
        "| baseline | criterion=cross_entropy | — | 78.00 | 80.00 | 79.00 | — | — | — | — |"]


def test_the_study_and_the_run_directories_agree_here(reported):
    root, out, *_ = reported
    assert rows(out / "problems.csv") == []
    assert (out / "problems.md").read_text().splitlines()[-1] == (
        "None: the runs of the 3 finished trials hold the scores the study recorded, and every folder under trials/ "
        "is a trial of the study.")


def test_the_figures_are_drawn_from_the_study(reported):
    root, out, *_ = reported
    search = searches.read(root)
    assert search_report.history_points(search) == {
        "finished": [(0, 62.0), (1, 72.0), (4, 71.0)], "pruned": [(2, 45.0)], "failed": [3],
        "best": [(0, 62.0), (1, 72.0), (4, 72.0)]}
    shares = search_report.Report(search).importances
    assert sorted(shares) == ["criterion.lam (magnitude)", "criterion.lam (sign)", "criterion.zeta"]
    assert sum(shares.values()) == pytest.approx(1.0)
    for name in ("history.png", "importances.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_disagreements_are_listed_and_warned_never_averaged(tmp_path, capsys):
    root = build(tmp_path / "demo")
    run = root / "trials" / "0000" / "seed=2" / "results.json"
    run.write_text(run.read_text().replace('"best": 0.64', '"best": 0.65'))
    other = root / "trials" / "0001" / "seed=1" / "results.json"
    other.write_text(other.read_text().replace('"trial": 1', '"trial": 4'))
    for path in (root / "trials" / "0004" / "seed=1").iterdir():
        path.unlink()
    (root / "trials" / "0004" / "seed=1").rmdir()
    (root / "trials" / "0009").mkdir()
    assert report_cli.main([str(root)]) == 0
    captured = capsys.readouterr()
    expected = ["trial 0: trials/0000/seed=2: results.json has validation.best 0.65, the study recorded 0.64",
                "trial 1: trials/0001/seed=1: results.json is of trial 4, not 1",
                "trial 4: trials/0004/seed=1: the run directory is missing",
                "trials/0009: is the folder of no trial of the study (its trials: 0-5)"]
    assert captured.err.splitlines() == [f"istar-report: warning: {line}" for line in expected]
    assert [searches.problem_line({**row, "trial": row["trial"] or None})
            for row in rows(root / "report" / "problems.csv")] == expected
    assert "chosen: trial 1 (criterion.lam=0.25, criterion.zeta=0.8), held-out accuracy 72.00" in captured.out


def test_a_single_finished_trial_and_no_final_cells_say_what_is_missing(tmp_path, capsys):
    root = build(tmp_path / "demo", trials=TRIALS[:4], final={})
    out = tmp_path / "report"
    assert report_cli.main([str(root), "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "search demo: 4 of 8 trials (2 finished, 1 pruned, 1 failed)",
        "chosen: trial 1 (criterion.lam=0.25, criterion.zeta=0.8), held-out accuracy 72.00",
        "final: no paired comparison of trial1 with the baseline in final/ yet (istar-tune demo --final runs it)",
        f"report in {out}"]
    assert (out / "chosen.md").read_text().splitlines()[-1] == (
        "final/ holds no finished cell of the chosen setting (trial1): istar-tune demo --final scores it and the "
        "baseline on the evaluation split.")
    assert not (out / "final").exists()

    root = build(tmp_path / "one", trials=TRIALS[1:2], final={})
    assert report_cli.main([str(root)]) == 0
    assert "importances.png not written: fewer than 2 trials finished (1)" in capsys.readouterr().out.splitlines()
    assert not (root / "report" / "importances.png").exists() and (root / "report" / "history.png").is_file()


def test_without_a_finished_trial_nothing_is_chosen(tmp_path, capsys):
    root = build(tmp_path / "demo", trials=TRIALS[2:4], final={})
    assert report_cli.main([str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "search demo: 2 of 8 trials (0 finished, 1 pruned, 1 failed)",
        "chosen: none, no trial finished",
        "chosen.md not written: no trial finished (0 finished, 1 pruned, 1 failed)",
        "importances.png not written: fewer than 2 trials finished (0)",
        f"report in {root / 'report'}"]
    assert sorted(path.name for path in (root / "report").iterdir()) == [
        ".istar-report", "history.png", "problems.csv", "problems.md", "trials.csv", "trials.md"]


@pytest.mark.parametrize("damage, line", [
    (lambda db: db.unlink(), "search directory {root}: its study database {db} is missing (istar-tune writes it when "
                             "the search starts); no report written"),
    (lambda db: db.write_text("garbage"), "cannot open the study's database 'sqlite:///{db}': file is not a database; "
                                          "it is damaged: restore it from a copy, or start a new search_dir"),
])
def test_a_missing_or_unreadable_study_is_one_line_and_nothing_is_written(tmp_path, capsys, damage, line):
    root = build(tmp_path / "demo", trials=TRIALS[:1], final={})
    database = root / "study.db"
    damage(database)
    before = sorted(path.name for path in root.iterdir())
    assert report_cli.main([str(root)]) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [f"istar-report: error: {line.format(root=root, db=database.resolve())}"]
    assert sorted(path.name for path in root.iterdir()) == before


def test_an_out_folder_of_user_files_is_refused_and_a_search_is_reported_alone(tmp_path, capsys):
    root = build(tmp_path / "demo", trials=TRIALS[:1], final={})
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert report_cli.main([str(root), "--out", str(mine)]) == 4
    assert capsys.readouterr().err.splitlines() == [
        f"istar-report: error: --out {mine}: exists and holds files istar_plugin did not write (notes.txt); choose a "
        "new or empty --out, nothing was changed"]
    assert sorted(path.name for path in mine.iterdir()) == ["notes.txt"]
    assert report_cli.main([str(root), str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"istar-report: error: {root} is a search directory: report or archive it alone "
        f"(istar-report {root} [--archive DIR]), or compare it with other searches (istar-report {root} SEARCH_DIR "
        f"... --out DIR); {tmp_path} is no search directory"]


def test_a_penalty_on_chosen_layers_shows_their_eval_isoscore_per_trial(tmp_path):
    root = build(tmp_path / "layered")
    for seed, per_layer in ((1, [0.3, 0.01, 0.05]), (2, [0.3, 0.02, 0.06])):  # medians over layers 2-3: 0.03, 0.04
        path = root / "trials" / "0000" / f"seed={seed}" / "results.json"
        record = json.loads(path.read_text())
        record["criterion"]["layers"] = [2, 3]
        record["eval_isoscore_star_per_layer"] = per_layer
        path.write_text(json.dumps(record))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert report_cli.main([str(root)]) == 0
    table = rows(root / "report" / "trials.csv")
    assert [row["penalised_isoscore"] for row in table] == ["0.035", "", "", "", "", ""]
    header = (root / "report" / "trials.md").read_text().splitlines()[2]
    assert "| held-out accuracy | seed 1 | seed 2 | penalised layers' eval IsoScore* | pruned at |" in header


def test_a_search_report_reads_each_final_cells_results_once(tmp_path, monkeypatch):
    from test_report import counted_opens

    root = build(tmp_path / "demo")
    opened = counted_opens(monkeypatch)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert report_cli.main([str(root)]) == 0
    finals = sorted((root / "final").glob("*/results.json"))
    assert len(finals) == 4 and [opened[str(path)] for path in finals] == [1] * 4
