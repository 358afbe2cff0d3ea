"""istar-report SEARCH_DIR --archive DIR: an istar-tune search's records kept small enough for git (its study as
study.json, each ended trial's runs and the final grid's cells as a grid archive keeps them), reported exactly as the
live search; archiving again adds and never changes; a different record is refused with one line, nothing written.
The searches are built as tests/test_search_report.py builds them (no training)."""
import contextlib
import io
import json

import optuna
import pytest
import yaml

from istar_plugin.cli import report as report_cli
from istar_plugin.reports import docs_tables
from istar_plugin.reports.records import searches
from istar_plugin.reports.records.archive import left_out
from istar_plugin.reports.records.searches import trial_record
from test_search_report import SPEC, TRIALS, build, write_run

ENDED_TRIALS = TRIALS[:5]  # finished, finished, pruned, failed, finished
REPORT_FILES = {"chosen.csv", "chosen.md", "problems.csv", "problems.md", "trials.csv", "trials.md"}


def istar_report(*argv):
    """istar-report's exit code, stdout and stderr."""
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = report_cli.main([str(arg) for arg in argv])
    return code, out.getvalue(), err.getvalue()


def files(folder):
    """Every file under ``folder`` (relative path -> bytes)."""
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


def with_progress(root, *lines):
    with open(root / "progress.log", "a") as log:
        log.writelines(f"2026-01-01T12:00:00 host worker 0: {line}\n" for line in lines)
    return root


def test_an_archive_reports_exactly_as_the_live_search(tmp_path):
    root = with_progress(build(tmp_path / "demo", trials=ENDED_TRIALS), "trial 0 started")
    for seed in (1, 2):  # weights and checkpoints stay behind
        (root / "trials" / "0000" / f"seed={seed}" / "model").mkdir()
        (root / "trials" / "0000" / f"seed={seed}" / "model" / "model.safetensors").write_bytes(b"\0" * 1000)
    archive = tmp_path / "evidence" / "demo"
    code, out, err = istar_report(root, "--archive", archive)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[-1] == (f"{root}: study.json holds 5 trials; 13 runs archived, 0 archived before, 0 skipped; archive "
                         f"in {archive}")
    assert [line.split(":")[0] for line in lines[:-1]] == [
        *(f"archived trials/000{n}/seed={s}" for n in range(5) for s in ((1,) if n == 3 else (1, 2))),
        "archived final/setting=baseline,seed=1", "archived final/setting=baseline,seed=2",
        "archived final/setting=trial1,seed=1", "archived final/setting=trial1,seed=2"]
    assert lines[6].startswith("archived trials/0003/seed=1: failed") and lines[0].endswith(" kB")
    assert sorted(path.name for path in archive.iterdir()) == [
        ".istar-archive", "final", "progress.log", "search.yaml", "study.json", "trials"]
    assert sorted(path.name for path in (archive / "trials" / "0000" / "seed=1").iterdir()) == [
        "archive.json", "config.yaml", "results.json"]
    assert (archive / "search.yaml").read_bytes() == (root / "search.yaml").read_bytes()
    assert (archive / "progress.log").read_bytes() == (root / "progress.log").read_bytes()
    assert searches.is_search(archive)

    code, live_out, _ = istar_report(root, "--out", tmp_path / "live")
    code_archived, archived_out, archived_err = istar_report(archive, "--out", tmp_path / "archived")
    assert (code, code_archived, archived_err) == (0, 0, "")
    assert archived_out.splitlines()[:-1] == live_out.splitlines()[:-1]
    assert archived_out.splitlines()[0] == "search demo: 5 of 8 trials (3 finished, 1 pruned, 1 failed)"
    live_report, archived_report = files(tmp_path / "live"), files(tmp_path / "archived")
    tables = {name for name in live_report if not name.endswith((".png", ".istar-report"))}
    assert {*REPORT_FILES, "final/versus_base.csv", "final/table1.md"} <= tables
    assert {name: archived_report[name] for name in tables} == {  # the final grid's cells.csv names its cells
        name: live_report[name].replace(str(root).encode(), str(archive).encode()) for name in tables}
    assert {name for name in tables if live_report[name] != archived_report[name]} == {
        "final/cells.csv", "final/provenance.csv"}
    assert set(archived_report) == set(live_report)  # the figures too
    live, archived = searches.read(root), searches.read(archive)
    assert [trial_record(t) for t in archived.trials] == [trial_record(t) for t in live.trials]


def test_the_study_is_kept_as_text_every_trial_as_optuna_recorded_it(tmp_path):
    root = build(tmp_path / "demo", trials=ENDED_TRIALS)
    assert istar_report(root, "--archive", tmp_path / "archive")[0] == 0
    record = json.loads((tmp_path / "archive" / "study.json").read_text())
    assert (record["study"], record["directions"], [t["state"] for t in record["trials"]]) == (
        "demo", ["MAXIMIZE"], ["COMPLETE", "COMPLETE", "PRUNED", "FAIL", "COMPLETE"])
    assert record["trials"][2] == {
        "number": 2, "state": "PRUNED", "values": None,
        "params": {"criterion.lam (magnitude)": 2.0, "criterion.lam (sign)": 1, "criterion.zeta": 0.2},
        "distributions": {
            "criterion.lam (magnitude)": {"name": "FloatDistribution",
                                          "attributes": {"low": 0.01, "high": 3.0, "log": True, "step": None}},
            "criterion.lam (sign)": {"name": "CategoricalDistribution", "attributes": {"choices": [-1, 1]}},
            "criterion.zeta": {"name": "CategoricalDistribution", "attributes": {"choices": [0.2, 0.8]}}},
        "user_attrs": {"values": {"criterion.lam": 2.0, "criterion.zeta": 0.2}, "scores": {"1": 0.58}},
        "system_attrs": {}, "intermediate_values": {"15": 0.55, "30": 0.58, "1000015": 0.45},
        "datetime_start": "2026-01-01T12:05:00", "datetime_complete": "2026-01-01T12:06:00"}
    assert record["trials"][1]["values"] == [(0.70 + 0.74) / 2]


def test_archiving_again_adds_what_ended_since_and_changes_nothing(tmp_path):
    root = with_progress(build(tmp_path / "demo"), "trial 5 started")  # trial 5 is running
    archive = tmp_path / "archive"
    code, out, _ = istar_report(root, "--archive", archive)
    assert code == 0 and out.splitlines()[-1] == (
        f"{root}: study.json holds 6 trials (1 not ended: their runs are archived once they end); 13 runs archived, 0 "
        f"archived before, 0 skipped; archive in {archive}")
    assert not (archive / "trials" / "0005").exists()
    first = files(archive)
    assert json.loads(first["study.json"])["trials"][5]["state"] == "RUNNING"
    code, out, _ = istar_report(archive, "--out", tmp_path / "report")
    assert "running: trial 5 (since 2026-01-01 12:50)" in out.splitlines()

    code, out, _ = istar_report(root, "--archive", archive)  # the same search again: nothing changes
    assert code == 0 and out.splitlines() == [
        f"{root}: study.json holds 6 trials (1 not ended: their runs are archived once they end); 0 runs archived, 13 "
        f"archived before, 0 skipped; archive in {archive}"]
    assert files(archive) == first

    storage = optuna.storages.RDBStorage(SPEC.storage_url(root))  # trial 5 ends, and the log grows
    trial_id = optuna.load_study(study_name="demo", storage=storage).trials[5]._trial_id
    storage.set_trial_user_attr(trial_id, "scores", {"1": 0.5, "2": 0.52})
    storage.set_trial_state_values(trial_id, optuna.trial.TrialState.COMPLETE, [0.51])
    for seed in (1, 2):
        run = root / "trials" / "0005" / f"seed={seed}"
        if run.is_dir():
            run.rmdir()
        write_run(run, seed, {"name": "istar", "lam": 0.3, "zeta": 0.2}, 0.5,
                  validation={"best": 0.5 + (seed - 1) / 50, "metric": "accuracy"}, search_trial={"trial": 5})
    with_progress(root, "trial 5 finished")
    record = yaml.safe_load((root / "search.yaml").read_text())  # and istar-tune extended the budget
    (root / "search.yaml").write_text(yaml.safe_dump({**record, "trials": 12}, sort_keys=False))
    code, out, _ = istar_report(root, "--archive", archive)
    assert code == 0 and out.splitlines()[-1] == (
        f"{root}: study.json holds 6 trials; 2 runs archived, 13 archived before, 0 skipped; archive in {archive}")
    now = files(archive)
    assert set(now) - set(first) == {f"trials/0005/seed={seed}/{name}" for seed in (1, 2)
                                     for name in ("archive.json", "config.yaml", "results.json")}
    assert {name: data for name, data in now.items() if name in first and data != first[name]}.keys() == {
        "study.json", "progress.log", "search.yaml"}
    assert now["search.yaml"] == (root / "search.yaml").read_bytes()
    before, after = json.loads(first["study.json"])["trials"], json.loads(now["study.json"])["trials"]
    assert after[:5] == before[:5] and after[5]["state"] == "COMPLETE" and after[5]["values"] == [0.51]
    assert now["progress.log"].startswith(first["progress.log"]) and now["progress.log"].endswith(b"finished\n")
    assert json.loads(now["trials/0005/seed=1/archive.json"])["source"].endswith(str(root / "trials/0005/seed=1"))


def test_an_archive_of_an_archive_holds_the_same_records(tmp_path):
    root = with_progress(build(tmp_path / "demo", trials=ENDED_TRIALS), "trial 0 started")
    assert istar_report(root, "--archive", tmp_path / "one")[0] == 0
    assert istar_report(tmp_path / "one", "--archive", tmp_path / "two")[0] == 0
    one, two = files(tmp_path / "one"), files(tmp_path / "two")
    markers = {name for name in one if name.endswith(".istar-archive")}
    assert markers == {".istar-archive", "trials/.istar-archive", "final/.istar-archive"} and set(one) == set(two)
    assert {name: data for name, data in one.items() if name not in markers} == {
        name: data for name, data in two.items() if name not in markers}


def refused(tmp_path, archive, *argv):
    """istar-report's exit code and stderr, checking that it printed nothing else and changed nothing in ``archive``."""
    before = files(archive) if archive.is_dir() else None
    code, out, err = istar_report(*argv)
    assert out == "" and err.count("\n") == 1
    assert (files(archive) if archive.is_dir() else None) == before
    return code, err.rstrip("\n")


def other_search(tmp_path, name="other", **changes):
    return build(tmp_path / name, trials=[(*ENDED_TRIALS[0][:1], -0.75, *ENDED_TRIALS[0][2:]), *ENDED_TRIALS[1:]],
                 **changes)


@pytest.mark.parametrize("change, differs", [
    ("a run's result", "0001/seed=2/results.json differs from the record archived there; nothing was archived "
                       "(an archived record is never replaced: remove {archive}/trials/0001/seed=2 to archive this "
                       "one)"),
    ("a final cell", "setting=trial1,seed=1/results.json differs from the record archived there; nothing was "
                     "archived (an archived record is never replaced: remove {archive}/final/setting=trial1,seed=1 "
                     "to archive this one)"),
    ("an ended trial", "study.json (trial 0) differs from the record archived there; " + "REPLACED"),
    ("the log", "progress.log differs from the record archived there; " + "REPLACED"),
    ("the search", "search.yaml (seeds, final_seeds) differs from the record archived there; " + "REPLACED"),
])
def test_a_different_record_is_refused_in_one_line_and_nothing_is_archived(tmp_path, change, differs):
    root = with_progress(build(tmp_path / "demo", trials=ENDED_TRIALS), "trial 0 started")
    archive = tmp_path / "archive"
    assert istar_report(root, "--archive", archive)[0] == 0
    if change == "a run's result":
        path = root / "trials" / "0001" / "seed=2" / "results.json"
        path.write_text(path.read_text().replace('"accuracy": 0.5', '"accuracy": 0.55'))
    elif change == "a final cell":
        path = root / "final" / "setting=trial1,seed=1" / "results.json"
        path.write_text(path.read_text().replace('"accuracy": 0.8', '"accuracy": 0.81'))
        (root / "trials" / "0001" / "seed=2" / "results.json").unlink()  # and a run gone: still nothing archived
    elif change == "an ended trial":
        root = with_progress(other_search(tmp_path), "trial 0 started")
    elif change == "the log":
        (root / "progress.log").write_text("2026-01-02T00:00:00 host worker 0: a log started anew\n")
    else:
        record = yaml.safe_load((root / "search.yaml").read_text())
        (root / "search.yaml").write_text(yaml.safe_dump({**record, "seeds": [1], "final_seeds": [1, 2, 3]}))
    code, error = refused(tmp_path, archive, root, "--archive", archive)
    where = {"a run's result": f"{archive}/trials", "a final cell": f"{archive}/final"}.get(change, archive)
    assert code == 4 and error == f"istar-report: error: --archive {where}: " + differs.format(archive=archive).replace(
        "REPLACED", "nothing was archived (an archived record is never replaced: choose a new --archive folder for "
                    "this one)")


def test_bad_places_to_archive_are_one_line_and_nothing_is_written(tmp_path):
    root = build(tmp_path / "demo", trials=ENDED_TRIALS)
    before = files(root)
    inside = root / "kept"
    assert refused(tmp_path, inside, root, "--archive", inside) == (
        2, f"istar-report: error: --archive {inside} is inside the search {root}: choose a folder outside it")
    grid_archive = tmp_path / "grid_archive"
    assert istar_report(root / "final", "--archive", grid_archive)[0] == 0
    assert refused(tmp_path, grid_archive, root, "--archive", grid_archive) == (
        4, f"istar-report: error: --archive {grid_archive}: is an archive of a grid's records, not of a search; "
           "choose a new or empty --archive folder, nothing was changed")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert refused(tmp_path, mine, root, "--archive", mine) == (
        4, f"istar-report: error: --archive {mine}: exists and holds files istar_plugin did not write (notes.txt); "
           "choose a new or empty --archive, nothing was changed")
    assert refused(tmp_path, tmp_path / "out", root, tmp_path / "grid_archive", "--archive", tmp_path / "out") == (
        2, f"istar-report: error: {root} is a search directory: report or archive it alone (istar-report {root} "
           f"[--archive DIR]), or compare it with other searches (istar-report {root} SEARCH_DIR ... --out DIR); "
           f"{tmp_path / 'grid_archive'} is no search directory")
    (root / "study.db").rename(tmp_path / "study.db")
    assert refused(tmp_path, tmp_path / "new", root, "--archive", tmp_path / "new") == (
        4, f"istar-report: error: search directory {root}: its study database {tmp_path.resolve() / 'demo'}"
           "/study.db is missing (istar-tune writes it when the search starts); nothing archived")
    (tmp_path / "study.db").rename(root / "study.db")
    assert files(root) == before and not (tmp_path / "new").exists() and not inside.exists()


def test_an_archive_without_its_study_record_is_one_line(tmp_path):
    root = build(tmp_path / "demo", trials=ENDED_TRIALS)
    archive = tmp_path / "archive"
    assert istar_report(root, "--archive", archive)[0] == 0
    (archive / "study.json").write_text('{"study": "demo"}')
    assert refused(tmp_path, archive, archive) == (
        4, f"istar-report: error: search archive {archive}: its study record {archive}/study.json is damaged (no "
           "mapping holding a list of trials)")
    (archive / "study.json").unlink()
    assert refused(tmp_path, archive, archive) == (
        4, f"istar-report: error: search archive {archive}: its study record {archive}/study.json is missing "
           "(istar-report SEARCH_DIR --archive writes it last: archive the search again to complete it)")
    assert istar_report(root, "--archive", archive)[0] == 0 and istar_report(archive)[0] == 0


def test_a_docs_marker_renders_a_search_archives_table(tmp_path):
    root = build(tmp_path / "demo", trials=ENDED_TRIALS)
    docs = tmp_path / "docs"
    assert istar_report(root, "--archive", docs / "evidence" / "demo")[0] == 0
    assert istar_report(root, "--out", tmp_path / "live")[0] == 0
    page = docs / "page.md"
    page.write_text("<!-- table: evidence/demo trials.md -->\nold\n<!-- end table -->\n\n"
                    "<!-- table: evidence/demo chosen.csv -->\n<!-- end table -->\n")
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert docs_tables.main([str(docs)]) == 0 and docs_tables.main([str(docs), "--check"]) == 0
    assert out.getvalue().splitlines() == [f"{page}: 2 table(s), rewritten", f"{page}: 2 table(s), up to date"]
    assert page.read_text() == (
        f"<!-- table: evidence/demo trials.md -->\n{(tmp_path / 'live' / 'trials.md').read_text()}<!-- end table -->"
        f"\n\n<!-- table: evidence/demo chosen.csv -->\n{docs_tables.render_csv(tmp_path / 'live' / 'chosen.csv')}"
        "<!-- end table -->\n")


def test_a_search_archives_damaged_records_are_named_as_left_out(tmp_path):
    archive = tmp_path / "archive"
    assert istar_report(build(tmp_path / "demo", trials=ENDED_TRIALS), "--archive", archive)[0] == 0
    assert left_out(archive) == []  # its failed trial's run is the study's failed trial, not a damaged record
    (archive / "final" / "setting=trial1,seed=2" / "results.json").write_text("{ cut short")
    (archive / "trials" / "0004" / "seed=1" / "results.json").write_text("[]")
    final, trial = left_out(archive)
    assert final.startswith(f"{archive / 'final' / 'setting=trial1,seed=2'}: unreadable results.json")
    assert trial.startswith(f"{archive}: trial 4: trials/0004/seed=1: ")
