"""istar-analyze and istar-embed read a run without changing a byte of it, say which step and checkpoint they
scored and that the run finished, and refuse a failed, unfinished or damaged run instead of scoring an older
checkpoint as the final model; istar-analyze's --out holds one invocation's files and is locked; its undefined
measures are null with a reason."""
import hashlib
import json
import shutil
import socket
from pathlib import Path

import pytest

from istar_plugin.analysis import analyze
from istar_plugin.analysis.loading import load_run
from istar_plugin.cli import analyze as analyze_cli
from istar_plugin.analysis import sts_embeddings
from istar_plugin.cli import embed as embed_cli
from istar_plugin.cli import export as export_cli
from istar_plugin.errors import CheckpointError
from istar_plugin.reports import docs_tables
from istar_plugin.storage.results import RESULTS, failed_record, write_results

from helpers import lock_held_elsewhere
from test_analyze import tiny_run

FINAL = "checkpoints/step_00000002.pt"  # 32 examples, batches of 8, 2 accumulated: 2 steps, both kept


def snapshot(run: Path) -> dict[str, str]:
    """Every file of the run (hidden ones included) by its SHA-256, and every folder."""
    return {path.relative_to(run).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file()
            else "folder" for path in sorted(run.rglob("*"))}


@pytest.fixture(scope="module")
def finished(tiny_bert, shared_data, tmp_path_factory):
    run = tiny_run(tiny_bert, shared_data, tmp_path_factory.mktemp("runs") / "finished", "criterion=cross_entropy",
                   "save_every=1", "keep_checkpoints=2")
    assert sorted(path.name for path in (run / "checkpoints").glob("*.pt")) == ["step_00000001.pt",
                                                                                "step_00000002.pt"]
    return run


def variant(finished: Path, tmp_path: Path, kind: str) -> Path:
    """A copy of the finished run made failed, unfinished (no results.json) or damaged (its final checkpoint)."""
    run = tmp_path / kind
    shutil.copytree(finished, run)
    if kind == "failed":
        write_results(run / RESULTS, failed_record("the loss became nan at step 2", "sst2", "minilm",
                                                   {"name": "cross_entropy"}, seed=42))
    elif kind == "unfinished":
        (run / RESULTS).unlink()
    else:
        data = bytearray((run / FINAL).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (run / FINAL).write_bytes(bytes(data))
    return run


REASONS = {
    "failed": "failed: the loss became nan at step 2 (results.json status: failed)",
    "unfinished": "no results.json (the run has not finished)",
    "damaged": "its final checkpoint step_00000002.pt is damaged (its SHA-256 does not match step_00000002.pt.sha256 "
               "(damaged bytes)); nothing was read from it and the run was left as it was",
}


@pytest.mark.parametrize("kind", ["failed", "unfinished", "damaged"])
def test_a_failed_unfinished_or_damaged_run_is_refused_and_left_byte_identical(kind, finished, tmp_path, capsys,
                                                                                monkeypatch, shared_data):
    run = variant(finished, tmp_path, kind)
    before = snapshot(run)
    monkeypatch.setattr(analyze, "load_run", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr(sts_embeddings, "open_encoder", lambda *a, **k: pytest.fail("a model was loaded"))
    assert analyze_cli.main([str(run), "--out", str(tmp_path / "analysis")]) == 2
    assert capsys.readouterr().err == f"istar-analyze: error: {run}: {REASONS[kind]}\n"
    assert embed_cli.main([str(run), "--sts", str(shared_data / "stsb"), "--out", str(tmp_path / "embed")]) == 4
    assert capsys.readouterr().err == (f"istar-embed: error: MODEL_OR_RUN {run}: {REASONS[kind]}; istar-embed scores a "
                                       "finished run's final model only\n")
    assert snapshot(run) == before and not (tmp_path / "analysis").exists() and not (tmp_path / "embed").exists()


def test_loading_a_damaged_final_checkpoint_renames_nothing_and_loads_no_older_one(finished, tmp_path):
    run = variant(finished, tmp_path, "damaged")
    before = snapshot(run)
    with pytest.raises(CheckpointError, match=r"step_00000002\.pt: damaged \(its SHA-256 does not match"):
        load_run(run)
    assert snapshot(run) == before  # no step_00000002.pt.damaged, and step 1 was not scored in its place


def test_a_damaged_older_checkpoint_is_skipped_alone_and_said_so_in_one_line(finished, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    older = run / "checkpoints" / "step_00000001.pt"
    older.write_bytes(older.read_bytes()[:1000])
    before, out = snapshot(run), tmp_path / "out"
    assert analyze_cli.main([str(run), "--checkpoints", "--out", str(out)]) == 2  # partial: exit 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"istar-analyze: skipped the checkpoint of step 1 of {run} (its step 2 was analysed): {older}: damaged (its "
        "SHA-256 does not match step_00000001.pt.sha256 (damaged bytes))")
    assert json.loads((out / "run" / "step_2" / "analysis.json").read_text())["step"] == 2
    assert not (out / "run" / "step_1").exists() and snapshot(run) == before


def test_analyze_says_which_step_and_checkpoint_it_scored_and_changes_nothing(finished, tmp_path, capsys):
    before = snapshot(finished)
    out = tmp_path / "out"
    assert analyze_cli.main([str(finished), "--out", str(out)]) == 0
    assert snapshot(finished) == before
    analysis = json.loads((out / "finished" / "analysis.json").read_text(),
                          parse_constant=lambda name: pytest.fail(f"non-standard JSON {name}"))
    assert (analysis["step"], analysis["weights"], analysis["run_finished"]) == (2, FINAL, True)
    captured = capsys.readouterr()
    assert f"; step 2 of the finished run ({FINAL}); " in captured.out
    assert f"  finished: final model of the finished run loaded from {FINAL} (step 2) in " in captured.err


def test_embed_says_which_step_and_checkpoint_it_scored_and_changes_nothing(finished, shared_data, tmp_path, capsys):
    before = snapshot(finished)
    out = tmp_path / "out"
    assert embed_cli.main([str(finished), "--sts", str(shared_data / "stsb"), "--transforms", "none", "--fit", "dev",
                           "--out", str(out)]) == 0
    assert snapshot(finished) == before
    scored = json.loads((out / "embeddings.json").read_text())["scored"]
    assert scored == {"model": str(finished), "run_dir": str(finished), "step": 2, "weights": FINAL,
                      "run_finished": True}
    captured = capsys.readouterr()
    assert f"istar-embed: scoring the finished run {finished} at step 2 ({FINAL})\n" in captured.err
    assert f"wrote {out / 'embeddings.json'} (finished run, step 2, {FINAL}) in " in captured.out


def test_embed_of_a_failed_runs_export_says_it_is_not_a_finished_result(finished, shared_data, tmp_path, capsys):
    run, exported = variant(finished, tmp_path, "failed"), tmp_path / "exported"
    assert export_cli.main([str(run), "--out", str(exported)]) == 0
    out = tmp_path / "out"
    assert embed_cli.main([str(exported), "--sts", str(shared_data / "stsb"), "--transforms", "none", "--fit", "dev",
                           "--out", str(out)]) == 0
    note = (f"NOT a finished result: an export of step 2 ({FINAL}) of the run {run.resolve()}, whose state then was "
            f"'failed: the loss became nan at step 2' ({exported / 'export.json'})")
    captured = capsys.readouterr()
    assert f"istar-embed: scoring {exported}: {note}\n" in captured.err
    assert f"wrote {out / 'embeddings.json'} ({note}) in " in captured.out
    table = (out / "embeddings.md").read_text()
    assert table.startswith(f"{note}\n\n| layer | transform | Spearman x100 |")
    scored = json.loads((out / "embeddings.json").read_text())["scored"]
    assert scored == {"model": str(exported), "run_dir": None, "run_finished": False, "export": {
        "run": str(run.resolve()), "run_state": "failed: the loss became nan at step 2", "step": 2,
        "checkpoint": FINAL, "finished_result": False}}
    shutil.copytree(out, tmp_path / "evidence")  # the folder as kept in git: the docs render the same note
    marker = "<!-- table: evidence embeddings.md -->\n"
    assert docs_tables.render_page(marker + "<!-- end table -->\n", tmp_path) == f"{marker}{table}<!-- end table -->\n"
    (exported / "export.json").write_text("{")
    assert embed_cli.main([str(exported), "--sts", str(shared_data / "stsb"), "--out", str(out)]) == 7
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        f"istar-embed: error: {exported / 'export.json'}: not JSON (")


def test_a_second_analysis_into_the_same_out_replaces_the_first_s_files_and_no_other(finished, tmp_path, capsys):
    second = tmp_path / "second"
    shutil.copytree(finished, second)
    out = tmp_path / "out"
    assert analyze_cli.main([str(finished), "--out", str(out)]) == 0
    (out / "notes.txt").write_text("the user's")
    assert analyze_cli.main([str(second), "--out", str(out)]) == 0
    marker = json.loads((out / ".istar-analysis").read_text())
    figures = ["figure4.png", "figure5.png", "figure6.png", "massive.png", "outliers.png"]
    assert marker["files"] == [*figures, "second/analysis.json", "summary.md"] and marker["complete"] is True
    assert sorted(path.relative_to(out).as_posix() for path in out.rglob("*") if path.is_file()) == sorted(
        [".istar-analysis", "notes.txt", "second/analysis.json", "summary.md", *figures])


def test_a_second_analysis_on_an_out_in_use_is_refused(finished, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    with lock_held_elsewhere(out) as pid:
        monkeypatch.setattr(analyze, "load_run", lambda *a, **k: pytest.fail("a model was loaded"))
        assert analyze_cli.main([str(finished), "--out", str(out)]) == 4  # RunDirError's code, as istar-embed's
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"istar-analyze: error: --out {out} is in use by another run (host "
                              f"{socket.gethostname()}, "
                              f"pid {pid}, since ")
        assert err.endswith("); wait for it to finish or choose another --out") and "\n" not in err


def test_measures_of_a_single_example_are_null_with_their_reasons(finished):
    loaded = load_run(finished)
    statistics, examples = analyze.stream_features(loaded, loaded.features("eval")[:1], batch_size=1)
    result = analyze.measures(statistics, examples, None)
    assert result["cls_explained_variance"] is None
    assert result["cls_explained_variance_undefined"] == "needs at least 2 examples, got 1"
    assert result["twonn_per_layer"] == [None, None]
    assert result["twonn_per_layer_undefined"] == {"1": "TwoNN needs at least 3 points, got 1",
                                                   "2": "TwoNN needs at least 3 points, got 1"}
    json.dumps(result, allow_nan=False)  # standard JSON
    text = analyze_cli._twonn_text({"twonn_per_layer": result["twonn_per_layer"], **result})
    assert text == "undefined (TwoNN needs at least 3 points, got 1) undefined (TwoNN needs at least 3 points, got 1)"
