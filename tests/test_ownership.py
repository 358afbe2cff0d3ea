"""Commands write only into folders they created or that carry their own marker: real folders of user files are
refused in one line and left byte for byte as they were, and so is a user's file named like a command's output;
istar-export holds the run's lock and says what it exported (a failed run's checkpoint only to a folder of its own,
recorded as not a finished result)."""
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from istar_plugin.cli.export import main as export_main
from istar_plugin.cli.run import main as run_main
from istar_plugin.config import compose
from istar_plugin.errors import DivergedError, RunDirError
from istar_plugin.storage.ownership import ANALYSIS_MARKER, EXPORT_MARKER, RUN_MARKER, OwnedOutput
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments, two_step_run_arguments


def arguments(tiny_bert, shared_data, output_dir, *extra):
    return tiny_run_arguments(tiny_bert, shared_data, "data.max_train_samples=16", "optim.grad_accum=1",
                              "optim.epochs=1", f"output_dir={output_dir}", "tensorboard=false", *extra)


def snapshot(folder):
    """Every file under ``folder`` with its SHA-256: what must not change."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def user_folder(path):
    path.mkdir(parents=True)
    (path / "thesis.tex").write_text("\\chapter{Isotropy}\n")
    (path / "model").mkdir()
    (path / "model" / "weights.bin").write_bytes(b"\x00\x01 my own model")
    return snapshot(path)


@pytest.fixture(scope="module")
def kept_run(tiny_bert, shared_data, tmp_path_factory):
    """A finished run that keeps its last checkpoint (so istar-export has one to load)."""
    run = tmp_path_factory.mktemp("kept") / "run"
    Trainer(compose(arguments(tiny_bert, shared_data, run, "keep_checkpoints=1"))).fit()
    return run


def test_istar_run_refuses_a_folder_of_user_files_before_loading_a_model(tiny_bert, shared_data, tmp_path, capsys):
    before = user_folder(tmp_path / "mine")
    assert run_main(arguments(tiny_bert, shared_data, tmp_path / "mine")) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"istar-run: error: output_dir {tmp_path / 'mine'}: exists and holds files "
                              "istar_plugin did not write (model, thesis.tex); choose a new or empty output_dir")
    assert "newly initialised" not in "\n".join(err)  # refused before the model loaded
    assert snapshot(tmp_path / "mine") == before and not (tmp_path / "mine" / ".lock").exists()


def test_a_run_marks_its_folder_and_an_empty_folder_is_fine(tiny_bert, shared_data, tmp_path):
    (tmp_path / "empty").mkdir()
    Trainer(compose(arguments(tiny_bert, shared_data, tmp_path / "empty", "max_steps=1"))).fit()
    assert (tmp_path / "empty" / RUN_MARKER).is_file() and (tmp_path / "empty" / "model" / EXPORT_MARKER).is_file()


@pytest.mark.parametrize("target", ["run itself", "user folder", "a file"])
def test_istar_export_refuses_an_out_it_did_not_write(kept_run, tmp_path, capsys, target):
    out = {"run itself": kept_run, "user folder": tmp_path / "mine", "a file": tmp_path / "notes.txt"}[target]
    if target == "user folder":
        user_folder(out)
    if target == "a file":
        out.write_text("notes")
    before_run, before_out = snapshot(kept_run), (snapshot(out) if out.is_dir() else out.read_bytes())
    assert export_main([str(kept_run), "--out", str(out)]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"istar-export: error: --out {out}: ") and len(err.splitlines()) == 1
    expected = {"run itself": "is a run directory, not a model export",
                "user folder": "exists and holds files istar_plugin",
                "a file": "exists and is not a directory"}[target]
    assert expected in err
    assert snapshot(kept_run) == before_run
    assert (snapshot(out) if out.is_dir() else out.read_bytes()) == before_out


def test_istar_export_replaces_only_its_own_export_and_says_the_step(kept_run, tmp_path, capsys):
    out = tmp_path / "exported"
    assert export_main([str(kept_run), "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"exported step 2 to {out} (load with")  # finished: nothing more said
    (out / "stale.txt").write_text("from the first export")  # inside our export: ours to replace
    assert export_main([str(kept_run), "--out", str(out)]) == 0
    assert (out / EXPORT_MARKER).is_file() and not (out / "stale.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary or old copy left
    umask = os.umask(0)
    os.umask(umask)
    assert {path.name: oct(path.stat().st_mode & 0o777)
            for path in out.iterdir() if path.is_file()}["model.safetensors"] \
        == oct(0o666 & ~umask)  # not safetensors' owner-only 0600: the group sharing the cluster can load it


def test_istar_export_refuses_a_run_another_process_holds(kept_run, capsys):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from istar_plugin.storage.lock import RunDirLock
        with RunDirLock({str(kept_run)!r}):
            print("held", flush=True)
            time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(kept_run)
        assert export_main([str(kept_run)]) == 4
        err = capsys.readouterr().err.strip()
        assert f"run {kept_run} is in use by another run (host " in err and f"pid {holder.pid}" in err
        assert err.endswith("export once it has finished (or stop it)") and snapshot(kept_run) == before
    finally:
        holder.kill()
        holder.wait()


def test_istar_export_of_an_unfinished_run_says_so(kept_run, tmp_path, capsys):
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    for path in kept_run.rglob("*"):
        if path.is_file() and path.name != "results.json" and "model" not in path.parts:
            (unfinished / path.relative_to(kept_run)).parent.mkdir(parents=True, exist_ok=True)
            (unfinished / path.relative_to(kept_run)).write_bytes(path.read_bytes())
    assert export_main([str(unfinished)]) == 2  # its model/ is a finished run's: only to an explicit --out
    assert capsys.readouterr().err.strip() == (
        f"istar-export: error: {unfinished}: the run is unfinished (no results.json yet); its model/ is kept for a "
        "finished run's model: pass --out DIR to export its checkpoint step_00000002.pt anyway")
    assert not (unfinished / "model").exists()
    assert export_main([str(unfinished), "--out", str(tmp_path / "out")]) == 0
    assert (f"exported step 2 to {tmp_path / 'out'}: NOT a finished result, the run is unfinished (no results.json "
            f"yet); {tmp_path / 'out' / 'export.json'} records it") in capsys.readouterr().out


def copy_without_model(kept_run, damaged):
    """The run's files but its model/, in ``damaged``; returns its checkpoint."""
    damaged.mkdir()
    for path in kept_run.rglob("*"):
        if path.is_file() and "model" not in path.parts:
            (damaged / path.relative_to(kept_run)).parent.mkdir(parents=True, exist_ok=True)
            (damaged / path.relative_to(kept_run)).write_bytes(path.read_bytes())
    return next((damaged / "checkpoints").glob("step_*.pt"))


@pytest.mark.parametrize("case", ["another run's", "unfinished run's own", "older step into its own"])
def test_istar_export_never_writes_a_runs_model_folder_but_with_its_final_model(kept_run, tmp_path, capsys, case):
    other = tmp_path / "other"
    shutil.copytree(kept_run, other)
    run, extra = kept_run, []
    if case == "unfinished run's own":
        run = other
        (other / "results.json").unlink()
    if case == "older step into its own":
        run, extra = other, ["--step", "1"]
        for suffix in ("", ".sha256"):
            shutil.copy(other / "checkpoints" / f"step_00000002.pt{suffix}", other / "checkpoints" /
                        f"step_00000001.pt{suffix}")
    before = snapshot(other)
    assert export_main([str(run), *extra, "--out", str(other / "model")]) == 4
    why = {"another run's": f"it is kept for the run {other}'s final model, and step_00000002.pt is of the run "
                            f"{kept_run}",
           "unfinished run's own": "it is kept for a finished run's model, and the run is unfinished (no results.json "
                                   "yet)",
           "older step into its own": "it is kept for the run's final model, and step_00000001.pt is not its latest "
                                      "checkpoint"}[case]
    assert capsys.readouterr().err.splitlines() == [
        f"istar-export: error: --out {other / 'model'}: {why}; choose another --out, nothing was changed"]
    assert snapshot(other) == before  # the run's final model is as the run wrote it
    if case == "another run's":  # a finished run's latest checkpoint is its final model: its own model/ takes it
        assert export_main([str(kept_run), "--out", str(kept_run / "model")]) == 0
        assert capsys.readouterr().out.startswith(f"exported step 2 to {kept_run / 'model'} (load with")


def test_istar_export_of_a_damaged_checkpoint_is_one_line_and_keeps_it(kept_run, tmp_path, capsys):
    damaged = tmp_path / "damaged"
    checkpoint = copy_without_model(kept_run, damaged)
    data = bytearray(checkpoint.read_bytes())
    data[len(data) // 2] ^= 0xFF
    checkpoint.write_bytes(bytes(data))
    assert export_main([str(damaged)]) == 5
    err = capsys.readouterr().err.strip()
    assert err == f"istar-export: error: {checkpoint}: its SHA-256 does not match {checkpoint.name}.sha256 (damaged " \
                  "bytes); nothing exported (another step: --step)"
    assert checkpoint.is_file() and not (damaged / "model").exists()  # a reader renames nothing


@pytest.mark.parametrize("content, reason", [
    (lambda data: data[: len(data) // 2], r"it cannot be loaded \(RuntimeError: .*\)"),
    (lambda data: b"not a checkpoint\n", r"it cannot be loaded \(UnpicklingError: .*\)"),
    (lambda data: saved(torch.zeros(3)), "it holds a Tensor, not a checkpoint's dict"),
    (lambda data: saved({"weights": torch.zeros(3)}), r"it is not a run's checkpoint \(no model, config, step\)"),
], ids=["truncated", "text", "tensor", "other_dict"])
def test_istar_export_of_a_checkpoint_without_checksum_that_is_no_checkpoint_is_one_line(kept_run, tmp_path, capsys,
                                                                                        content, reason):
    damaged = tmp_path / "damaged"
    checkpoint = copy_without_model(kept_run, damaged)
    (checkpoint.parent / f"{checkpoint.name}.sha256").unlink()  # as an older version wrote it, or a user's file
    checkpoint.write_bytes(written := content(checkpoint.read_bytes()))
    assert export_main([str(damaged), "--out", str(tmp_path / "out")]) == 5
    [line] = capsys.readouterr().err.splitlines()
    assert re.fullmatch(rf"istar-export: error: {re.escape(str(checkpoint))}: {reason}; nothing exported "
                        r"\(another step: --step\)", line)
    assert checkpoint.read_bytes() == written and not (tmp_path / "out").exists()


def saved(obj):
    """The bytes ``torch.save`` writes for ``obj``."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def test_istar_export_of_a_run_with_inserted_modules_says_what_to_load(tiny_bert, shared_data, tmp_path, capsys):
    run = tmp_path / "flow"
    Trainer(compose(arguments(tiny_bert, shared_data, run, "criterion=flow", "max_steps=1",
                              "keep_checkpoints=1"))).fit()
    before, _ = snapshot(run), capsys.readouterr()
    assert export_main([str(run)]) == 7
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "modules inserted before its head (flow)" in err and "nothing exported" in err
    assert snapshot(run) == before and not (run / "model").exists()


def test_a_failed_runs_checkpoint_is_exported_only_to_out_and_says_what_it_is(tiny_bert, shared_data, tmp_path,
                                                                              capsys):
    run = tmp_path / "run"
    with pytest.raises(DivergedError):
        Trainer(compose(two_step_run_arguments(tiny_bert, shared_data, "optim.lr=1e6", "save_every=1", "max_steps=4",
                             f"output_dir={run}"))).fit()
    reason = json.loads((run / "results.json").read_text())["reason"]
    before, _ = sorted(path.name for path in run.iterdir()), capsys.readouterr()
    for extra in ([], ["--step", "1"]):
        assert export_main([str(run), *extra]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"istar-export: error: {run}: the run failed ({reason}); its model/ is kept for a finished run's model: "
            "pass --out DIR to export its checkpoint step_00000001.pt anyway"]
    assert sorted(path.name for path in run.iterdir()) == before  # no model/, no model_step_1/
    out = tmp_path / "diverged-step1"
    assert export_main([str(run), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"exported step 1 to {out}: NOT a finished result, the run failed ({reason}); {out / 'export.json'} records "
        "it (load with AutoModelForSequenceClassification/...ForQuestionAnswering or pipeline())")
    assert json.loads((out / "export.json").read_text()) == {
        "run": str(run), "run_state": f"failed: {reason}", "step": 1, "checkpoint": "checkpoints/step_00000001.pt",
        "finished_result": False}
    assert AutoModelForSequenceClassification.from_pretrained(out).config.id2label == {0: "negative", 1: "positive"}
    assert sorted(path.name for path in run.iterdir()) == before


def test_a_finished_runs_export_records_that_it_finished(tiny_bert, shared_data, tmp_path, capsys):
    run = tmp_path / "run"
    Trainer(compose(two_step_run_arguments(tiny_bert, shared_data, "keep_checkpoints=1", f"output_dir={run}"))).fit()
    capsys.readouterr()
    assert export_main([str(run)]) == 0
    assert capsys.readouterr().out.startswith(f"exported step 2 to {run / 'model'} (load with ")
    assert json.loads((run / "model" / "export.json").read_text()) == {
        "run": str(run), "run_state": "finished", "step": 2, "checkpoint": "checkpoints/step_00000002.pt",
        "finished_result": True}


def test_istar_grid_refuses_a_grid_dir_of_user_files(tmp_path, capsys):
    from istar_plugin.cli.grid import main as grid_main
    before = user_folder(tmp_path / "mine")
    assert grid_main(["smoke", "launcher=local", f"grid_dir={tmp_path / 'mine'}", "--dry-run"]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"istar-grid: error: grid_dir {tmp_path / 'mine'}: "
                          "exists and holds files istar_plugin did not write")
    assert snapshot(tmp_path / "mine") == before


def test_a_users_file_named_like_an_output_is_refused_and_left_as_it_was(tmp_path):
    out = tmp_path / "out"
    with OwnedOutput(out, ANALYSIS_MARKER) as folder:  # an earlier istar-analyze, before summary.md existed
        folder.replace([out / "figure4.png"])
        (out / "figure4.png").write_text("ours")
        folder.finish()
    (out / "summary.md").write_text("the user's")
    marker_before = (out / ANALYSIS_MARKER).read_text()
    with OwnedOutput(out, ANALYSIS_MARKER) as folder:
        with pytest.raises(RunDirError, match=r"--out .*: summary.md is not a file this command wrote; move it or "
                                              r"choose another --out, nothing was changed"):
            folder.replace([out / "figure4.png", out / "summary.md"])
    assert (out / "summary.md").read_text() == "the user's" and (out / "figure4.png").read_text() == "ours"
    assert (out / ANALYSIS_MARKER).read_text() == marker_before
    with OwnedOutput(out, ANALYSIS_MARKER) as folder:  # its own earlier files are replaced as before
        assert folder.replace([out / "figure4.png"]) == [out / "figure4.png"]
    assert json.loads((out / ANALYSIS_MARKER).read_text())["files"] == ["figure4.png"]
