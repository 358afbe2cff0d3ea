"""Archives of grid records (istar-report --archive): reported exactly as the live grid, each cell its record and a
summary of its log, archiving again changing nothing and a different record refused, failed cells kept and unfinished
ones skipped, archives from two machines merged with where each cell ran, a stage two finding its archived stage one.

The synthetic grid's cells are written as the trainer leaves them (config.yaml, results.json with its provenance,
predictions.json, attempts.jsonl, a 300-step metrics.jsonl); one slow test archives a real tiny grid.
"""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from istar_plugin.cli import report as report_cli
from istar_plugin.reports.records.archive import left_out
from istar_plugin.reports.records.run_extras import cell_provenance
from istar_plugin.storage.predictions import write_predictions
from istar_plugin.storage.provenance import cpu_of, machine
from istar_plugin.storage.results import ResultsRecord, failed_record, write_results

CRITERIA = {"cross_entropy": {"name": "cross_entropy"}, "istar": {"name": "istar", "lam": -1.0, "zeta": 0.2}}
CORRECT = {("cross_entropy", 1): 30, ("cross_entropy", 2): 28, ("cross_entropy", 3): 31,
           ("istar", 1): 32, ("istar", 2): 27, ("istar", 3): 33}  # of 40 evaluation examples


def write_cell(cell, method, seed, correct, host="machine-a", **results):
    """A finished RTE cell with ``correct`` of 40 examples right, as the trainer and a grid leave it."""
    references = [i % 2 for i in range(40)]
    cell.mkdir(parents=True)
    (cell / "config.yaml").write_text(f"task: rte\nseed: {seed}\ncriterion:\n  name: {method}\noutput_dir: {cell}\n")
    metrics = {"accuracy": correct / 40, "eval_isoscore_star": 0.2 - 0.01 * seed}
    provenance = {"host": host, "cpu": "AMD EPYC", "cpu_flags": ["avx512_bf16"], "torch": "2.13.0",
                  "istar_plugin": "0.1.0", "commit": "0123456789abcdef0123456789abcdef01234567"}
    write_results(cell / "results.json", ResultsRecord(
        "finished", "rte", "minilm", CRITERIA[method], seed, step=300, epoch=3, metrics=metrics,
        main_metric="accuracy", eval_isoscore_star=metrics["eval_isoscore_star"],
        extra={"precision": "bf16", "provenance": provenance}, **results))
    write_predictions(cell, "rte", 300, references[:correct] + [1 - r for r in references[correct:]], references)
    (cell / "attempts.jsonl").write_text(
        json.dumps({"event": "start", "host": host, "time": 1000.0}) + "\n"
        + json.dumps({"event": "finished", "host": host, "time": 1000.0 + 60 * seed}) + "\n")
    log = [{"step": step, "time": 1000.0 + step / 10, "train/loss": 1 / step} for step in range(1, 301)]
    log += [{"step": step, "time": 1000.0 + step / 10, "eval/accuracy": 0.7} for step in (100, 200, 300)]
    (cell / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n"
                                                for record in sorted(log, key=lambda r: r["step"])))
    (cell / "checkpoints").mkdir()
    (cell / "checkpoints" / "step_00000300.pt").write_bytes(b"weights")  # what an archive leaves behind
    (cell / ".istar-run").write_text("{}\n")


def make_grid(root, seeds=(1, 2, 3), host="machine-a"):
    for method in CRITERIA:
        for seed in seeds:
            write_cell(root / f"criterion={method},seed={seed}", method, seed, CORRECT[method, seed], host)
    return root


@pytest.fixture
def grid(tmp_path):
    return make_grid(tmp_path / "grid")


def files(directory):
    """Every file under ``directory`` -> its bytes."""
    return {path.relative_to(directory).as_posix(): path.read_bytes()
            for path in sorted(Path(directory).rglob("*")) if path.is_file()}


def report(capsys, *arguments):
    """istar-report's exit code and what it printed (stdout, stderr)."""
    code = report_cli.main([str(argument) for argument in arguments])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def tables(out, replace=()):
    """The report's tables (Markdown and CSV) as text, with each (old, new) of ``replace`` replaced."""
    texts = {}
    for path in sorted(out.iterdir()):
        if path.suffix in (".md", ".csv"):
            text = path.read_text()
            for old, new in replace:
                text = text.replace(old, new)
            texts[path.name] = text
    return texts


def test_an_archive_is_reported_exactly_as_its_grid(grid, tmp_path, capsys):
    assert report(capsys, grid, "--archive", tmp_path / "archive")[0] == 0
    shutil.rmtree(grid / "criterion=istar,seed=1" / "checkpoints")  # the grid may change in ways no record shows
    assert report(capsys, grid, "--out", tmp_path / "live")[0] == 0
    code, printed, _ = report(capsys, tmp_path / "archive", "--out", tmp_path / "archived")
    assert code == 0 and "6 finished cells" in printed and "missing or failed cells: 0" in printed
    live = tables(tmp_path / "live", replace=[(str(grid), str(tmp_path / "archive"))])  # cells.csv names the cells
    assert tables(tmp_path / "archived") == live
    assert {"table1.md", "versus_base.md", "wall_times.md", "provenance.md", "cells.csv"} <= set(live)
    assert "seeds and examples" in live["versus_base.md"]  # the predictions came along: examples resampled
    assert (tmp_path / "archived" / "figure3.png").is_file()


def test_an_archived_cell_is_its_record_and_a_summary_of_its_log(grid, tmp_path, capsys):
    code, printed, _ = report(capsys, grid, "--archive", tmp_path / "archive")
    assert code == 0 and printed.endswith("6 cells archived, 0 archived before, 0 skipped; "
                                          f"archive in {tmp_path / 'archive'}\n")
    assert re.search(r"^archived criterion=istar,seed=1: finished, \d+\.\d kB$", printed, re.M)
    source, cell = grid / "criterion=istar,seed=1", tmp_path / "archive" / "criterion=istar,seed=1"
    archived = files(cell)
    assert sorted(archived) == ["archive.json", "attempts.jsonl", "config.yaml", "metrics.jsonl", "predictions.json",
                                "results.json"]  # no checkpoints, no weights
    for name in ("attempts.jsonl", "config.yaml", "predictions.json", "results.json"):
        assert archived[name] == (source / name).read_bytes()
    kept = [json.loads(line) for line in archived["metrics.jsonl"].decode().splitlines()]
    training = [record["step"] for record in kept if "train/loss" in record]
    assert training == sorted({*range(1, 301, 3), 200, 300})  # every third, the last, and at each evaluation
    assert [record["step"] for record in kept if "eval/accuracy" in record] == [100, 200, 300]
    origin = json.loads(archived["archive.json"])
    assert origin["metrics.jsonl"] == {"records": 303, "kept": len(kept)} and origin["source"].endswith(str(source))
    assert sum(map(len, archived.values())) < 20_000
    assert (tmp_path / "archive" / ".istar-archive").is_file()


def test_archiving_again_changes_nothing_and_a_different_record_is_refused(grid, tmp_path, capsys):
    target = tmp_path / "archive"
    assert report(capsys, grid, "--archive", target)[0] == 0
    before = files(target)
    code, printed, _ = report(capsys, grid, "--archive", target)
    assert code == 0 and printed == f"{grid}: 0 cells archived, 6 archived before, 0 skipped; archive in {target}\n"
    assert files(target) == before
    changed = grid / "criterion=istar,seed=2"
    results = json.loads((changed / "results.json").read_text())
    results["metrics"]["accuracy"] = 0.9
    (changed / "results.json").write_text(json.dumps(results))
    write_cell(grid / "criterion=istar,seed=4", "istar", 4, 30)  # a new cell waits behind the refusal
    code, printed, error = report(capsys, grid, "--archive", target)
    assert code == 4 and printed == "" and error.count("\n") == 1
    assert (f"--archive {target}: criterion=istar,seed=2/results.json differs from the record archived there; "
            "nothing was archived") in error
    assert files(target) == before
    shutil.rmtree(target / "criterion=istar,seed=2")  # the way to archive the other record
    assert report(capsys, grid, "--archive", target)[0] == 0
    assert json.loads((target / "criterion=istar,seed=2" / "results.json").read_text())["metrics"]["accuracy"] == 0.9
    assert (target / "criterion=istar,seed=4" / "config.yaml").is_file()


def test_a_failed_cell_is_archived_as_failed_and_unfinished_or_running_ones_are_skipped(grid, tmp_path, capsys):
    failed = grid / "criterion=istar,seed=3"
    write_results(failed / "results.json", failed_record("the loss became nan at step 7", "rte", "minilm",
                                                         CRITERIA["istar"], 3))
    queued = grid / "criterion=istar,seed=5"
    queued.mkdir()
    (queued / "cell.yaml").write_text("task: rte\nseed: 5\n")
    running = grid / "criterion=istar,seed=2"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"descriptor = os.open({str(running / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(descriptor, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        code, printed, _ = report(capsys, grid, "--archive", tmp_path / "archive")
    finally:
        holder.kill()
        holder.wait()
    assert code == 0
    assert "archived criterion=istar,seed=3: failed: the loss became nan at step 7, " in printed
    assert "skipped criterion=istar,seed=5: no results.json (the run has not finished)\n" in printed
    assert re.search(r"^skipped criterion=istar,seed=2: cell .* is in use by another run \(.*\); "
                     r"archive it once its run ends$", printed, re.M)
    assert printed.endswith("5 cells archived, 0 archived before, 2 skipped; "
                            f"archive in {tmp_path / 'archive'}\n")
    code, printed, _ = report(capsys, tmp_path / "archive", "--out", tmp_path / "report")
    assert code == 0 and "4 finished cells" in printed and "missing or failed cells: 1" in printed
    assert "criterion=istar,seed=3: failed: the loss became nan at step 7 (results.json status: failed)" in printed


def test_an_archive_is_refused_inside_its_grid_or_in_a_folder_of_other_files(grid, tmp_path, capsys):
    code, _, error = report(capsys, grid, "--archive", grid / "archive")
    assert code == 2 and "is inside the grid" in error and not (grid / "archive").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    code, _, error = report(capsys, grid, "--archive", tmp_path / "mine")
    assert code == 4 and "holds files istar_plugin did not write (notes.txt)" in error
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("option", ["--archive", "--out"])
def test_a_folder_under_a_file_is_refused_in_one_line_naming_the_file(grid, tmp_path, capsys, option):
    (tmp_path / "notes.txt").write_text("mine")
    target = tmp_path / "notes.txt" / "archive"
    assert report(capsys, grid, option, target) == (
        4, "", f"istar-report: error: {option} {target}: {tmp_path / 'notes.txt'} exists and is not a directory; "
               f"choose another {option}\n")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_missing_grid_is_one_line_before_any_grid_is_archived_and_a_fault_inside_is_no_user_error(
        grid, tmp_path, capsys, monkeypatch):
    from istar_plugin.reports.records import archive

    missing = tmp_path / "missing"
    assert report(capsys, grid, missing, "--archive", tmp_path / "archive") == (
        2, "", f"istar-report: error: grid directory {str(missing)!r} does not exist or is not a directory\n")
    assert not (tmp_path / "archive").exists()

    def faulty(text):
        raise NotADirectoryError(20, "Not a directory", str(tmp_path / "elsewhere"))

    monkeypatch.setattr(archive, "summarised_log", faulty)
    with pytest.raises(NotADirectoryError, match="elsewhere"):
        report_cli.main([str(grid), "--archive", str(tmp_path / "archive")])


def test_archives_from_two_machines_merge_and_the_report_says_where_each_cell_ran(tmp_path, capsys):
    first, second = make_grid(tmp_path / "a" / "grid", (1, 2), "machine-a"), make_grid(tmp_path / "b" / "grid", (3,),
                                                                                        "machine-b")
    for grid, archived in ((first, "archive_a"), (second, "archive_b")):
        assert report(capsys, grid, "--archive", tmp_path / archived)[0] == 0
    merged = tmp_path / "merged"
    for archived in ("archive_a", "archive_b"):  # an archive's cells are copied as they are, archive.json included
        assert report(capsys, tmp_path / archived, "--archive", merged)[0] == 0
    assert files(merged / "criterion=istar,seed=3") == files(tmp_path / "archive_b" / "criterion=istar,seed=3")
    code, printed, _ = report(capsys, merged, "--out", tmp_path / "merged_report")
    assert code == 0 and "6 finished cells" in printed
    assert ("| machine-a | AMD EPYC | avx512_bf16 | 2.13.0 | bf16 | 0123456789ab | 4 (rte 4) |\n"
            "| machine-b | AMD EPYC | avx512_bf16 | 2.13.0 | bf16 | 0123456789ab | 2 (rte 2) |\n") in printed
    assert report(capsys, tmp_path / "archive_a", tmp_path / "archive_b", "--out", tmp_path / "both")[0] == 0
    both = tables(tmp_path / "both", replace=[(str(tmp_path / "archive_a"), str(merged)),
                                              (str(tmp_path / "archive_b"), str(merged))])
    assert {name: sorted(text.splitlines()) for name, text in both.items()} == {  # cells listed archive by archive
        name: sorted(text.splitlines()) for name, text in tables(tmp_path / "merged_report").items()}
    assert both["table1.md"] == tables(tmp_path / "merged_report")["table1.md"]
    clash = make_grid(tmp_path / "c" / "grid", (3,), "machine-c")  # the same cells, run again elsewhere
    code, _, error = report(capsys, clash, "--archive", merged)
    assert code == 4 and "criterion=cross_entropy,seed=3/config.yaml differs" in error  # its output_dir, first
    assert "(and 1 other cells)" in error


def test_an_archive_refuses_a_search_another_grid_or_another_task_and_writes_nothing(grid, tmp_path, capsys):
    from test_search_report import build

    search = tmp_path / "search_archive"
    assert report(capsys, build(tmp_path / "demo", final={}), "--archive", search)[0] == 0
    other_task = tmp_path / "sst2" / "grid"  # named as the grid, of another task
    write_cell(other_task / "criterion=istar,seed=1", "istar", 1, 30)
    results = json.loads((other_task / "criterion=istar,seed=1" / "results.json").read_text())
    (other_task / "criterion=istar,seed=1" / "results.json").write_text(json.dumps({**results, "task": "sst2"}))
    (other_task / "criterion=istar,seed=1" / "config.yaml").write_text("task: sst2\nseed: 1\n")
    assert report(capsys, other_task, "--archive", tmp_path / "sst2_archive")[0] == 0
    other_grid = make_grid(tmp_path / "other", seeds=(1,))
    assert report(capsys, other_grid, "--archive", tmp_path / "other_archive")[0] == 0
    expected = {
        search: "is the archive of search demo, not of grid grid (rte); choose a new or empty --archive folder for "
                "the grid, nothing was changed",
        tmp_path / "sst2_archive": "holds grid grid (sst2), not grid grid (rte); archive each grid into its own "
                                   "--archive folder, nothing was changed",
        tmp_path / "other_archive": "holds grid other (rte), not grid grid (rte); archive each grid into its own "
                                    "--archive folder, nothing was changed"}
    for target, reason in expected.items():
        before = files(target)
        assert report(capsys, grid, "--archive", target) == (4, "", f"istar-report: error: --archive {target}: "
                                                                    f"{reason}\n")
        assert files(target) == before
    assert report(capsys, grid, "--archive", tmp_path / "archive")[0] == 0
    write_cell(grid / "criterion=istar,seed=4", "istar", 4, 30)
    code, printed, _ = report(capsys, grid, "--archive", tmp_path / "archive")  # the same grid adds its new cell
    assert code == 0 and printed.endswith(f"{grid}: 1 cells archived, 6 archived before, 0 skipped; archive in "
                                          f"{tmp_path / 'archive'}\n")
    marker = json.loads((tmp_path / "archive" / ".istar-archive").read_text())
    assert (marker["grid"], marker["tasks"]) == ("grid", ["rte"])


def test_a_damaged_archived_cell_is_named_as_left_out_and_a_failed_one_is_not(grid, tmp_path, capsys):
    archive = tmp_path / "archive"
    failed = grid / "criterion=istar,seed=4"
    failed.mkdir()
    (failed / "config.yaml").write_text("task: rte\nseed: 4\ncriterion:\n  name: istar\n")
    write_results(failed / "results.json", failed_record("the loss became nan", "rte", "minilm", CRITERIA["istar"], 4))
    assert report(capsys, grid, "--archive", archive)[0] == 0
    assert left_out(archive) == []  # a failed run is a listed problem of its report, not a damaged record
    (archive / "criterion=istar,seed=2" / "results.json").write_text("{ cut short")
    (line,) = left_out(archive)
    assert line.startswith(f"{archive / 'criterion=istar,seed=2'}: unreadable results.json")


def test_several_grids_need_a_report_folder(grid, tmp_path, capsys):
    code, _, error = report(capsys, grid, grid)
    assert code == 2 and error == "istar-report: error: several GRID_DIRs: name the report's folder with --out\n"


def test_a_stage_two_finds_its_archived_stage_one_beside_it(tmp_path, capsys):
    grid = tmp_path / "grid"
    for seed in (1, 2):
        stage1 = grid / f"criterion=cross_entropy,seed={seed}"
        write_cell(stage1, "cross_entropy", seed, 30 + seed)
        write_cell(grid / f"criterion=isolayer,seed={seed}", "istar", seed, 32 + seed, init_from=str(stage1),
                   cls_explained_variance=(0.3, 0.35, 0.38), cls_isoscore=0.01)
        results = json.loads((grid / f"criterion=isolayer,seed={seed}" / "results.json").read_text())
        results["criterion"] = {"name": "isolayer"}
        (grid / f"criterion=isolayer,seed={seed}" / "results.json").write_text(json.dumps(results))
        config = grid / f"criterion=isolayer,seed={seed}" / "config.yaml"  # the config as isolayer's run writes it
        config.write_text(config.read_text().replace("name: istar", "name: isolayer"))
    assert report(capsys, grid, "--out", tmp_path / "live")[0] == 0
    assert report(capsys, grid, "--archive", tmp_path / "archive")[0] == 0
    shutil.rmtree(grid)  # the stage-1 paths the records name are gone: the archive holds them
    assert report(capsys, tmp_path / "archive", "--out", tmp_path / "archived")[0] == 0
    table3 = tables(tmp_path / "archived")["table3.csv"]
    assert table3 == tables(tmp_path / "live")["table3.csv"] and ",78.8 (1.77)," in table3  # stage 1: 31 and 32 of 40


# --- a real grid ----------------------------------------------------------------------------------------------


@pytest.mark.slow  # trains two tiny cells
def test_a_real_grid_archives_into_kilobytes_a_cell_with_where_it_ran(tiny_bert, shared_data, tmp_path, capsys):
    from istar_plugin.launch import grid as grid_module
    from istar_plugin.launch.options import parse
    from istar_plugin.launch.submit import launch, plan

    from helpers import tiny_run_arguments

    grid = grid_module.sweep([*tiny_run_arguments(tiny_bert, shared_data, "max_steps=2"),
                              "criterion=cross_entropy,istar"])
    launch(grid, tmp_path / "grid", plan(grid, tmp_path / "grid"), parse(["launcher=inline"])[0])
    assert report(capsys, tmp_path / "grid", "--archive", tmp_path / "archive")[0] == 0
    for cell in grid.cells:
        archived = files(tmp_path / "archive" / cell.name)
        assert sorted(archived) == ["archive.json", "attempts.jsonl", "config.yaml", "metrics.jsonl",
                                    "predictions.json", "results.json"]
        assert sum(map(len, archived.values())) < 30_000  # the cell itself holds its model and TensorBoard events
        here = machine()
        recorded = cell_provenance(tmp_path / "archive" / cell.name)
        assert (recorded.host, recorded.cpu, recorded.torch, recorded.commit) == (
            here["host"], here["cpu"], here["torch"], here["commit"])
        assert recorded.cpu_flags == tuple(here["cpu_flags"]) and recorded.precision in ("fp32", "bf16")
    assert report(capsys, tmp_path / "grid", "--out", tmp_path / "live")[0] == 0
    assert report(capsys, tmp_path / "archive", "--out", tmp_path / "archived")[0] == 0
    assert tables(tmp_path / "archived") == tables(tmp_path / "live", replace=[(str(tmp_path / "grid"),
                                                                                str(tmp_path / "archive"))])


def test_a_run_written_before_padding_free_existed_and_one_computing_padded_by_auto_are_one_setting(tmp_path):
    """The paper's padded cloud (criterion.padding=include) computes padded under model.padding_free=auto, as runs
    written before the key did: the report keeps their seeds in one setting, and a packed run stays apart."""
    from istar_plugin.reports.records.cells import collect
    from istar_plugin.reports.records.settings import settings

    archive = Path(__file__).resolve().parents[1] / "docs/evidence/replication_glue_minilm"
    older, newer = (f"recipe=rte,seed={seed},criterion=istar,lam=-3,padding=include" for seed in (1, 2))
    for name in (older, newer):
        shutil.copytree(archive / name, tmp_path / name)
    assert "padding_free" not in (tmp_path / older / "config.yaml").read_text()
    assert "padding_free: auto" in (tmp_path / newer / "config.yaml").read_text()
    records, problems = collect(tmp_path)
    assert not problems
    (one,) = settings(records)
    assert one.seeds == (1, 2) and one.variant == ""
    config = tmp_path / newer / "config.yaml"
    config.write_text(config.read_text().replace("padding: include", "padding: exclude"))
    assert sorted(len(setting.seeds) for setting in settings(collect(tmp_path)[0])) == [1, 1]


def test_provenance_names_the_machine_and_the_cpu_s_bf16_features():
    assert sorted(machine()) == ["commit", "cpu", "cpu_flags", "host", "istar_plugin", "torch"]
    assert cpu_of("model name\t: AMD EPYC 9B14\nflags\t\t: fpu avx512_bf16 sse\n") == ("AMD EPYC 9B14", ["avx512_bf16"])
