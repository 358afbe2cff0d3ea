"""Four ways a run went somewhere it should not: a quoted ``~`` in a path (a folder named ``~``), a damaged
``model.safetensors`` (a traceback), two istar-grid invocations on one grid (a cell recorded as failed), and the
export of a failed run (its last checkpoint in the run's own ``model/``, like a finished result)."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from transformers import AutoModelForSequenceClassification

from istar_plugin.cli import analyze as analyze_cli
from istar_plugin.cli import embed as embed_cli
from istar_plugin.cli import export as export_cli
from istar_plugin.cli import grid as grid_cli
from istar_plugin.cli import report as report_cli
from istar_plugin.cli.run import main as istar_run
from istar_plugin.config import compose, find_yaml
from istar_plugin.errors import ConfigError, DivergedError
from istar_plugin.launch import grid as grid_module
from istar_plugin.launch.cell import attempts
from istar_plugin.launch.options import LaunchError, parse
from istar_plugin.launch.submit import launch, plan, read_manifest
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments

NO_USER = "~no_such_user_istar"
TRUNCATED = "Error while deserializing header: invalid header length"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """``$HOME`` is ``tmp_path/home``; the current directory ``tmp_path/cwd``."""
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path / "home"


def tiny(tiny_bert, shared_data, *extra):
    return tiny_run_arguments(tiny_bert, shared_data, "data.max_train_samples=16", "batch_size=4",
                              "optim.grad_accum=1", "optim.epochs=1", "max_steps=2", "tensorboard=false",
                              "criterion=cross_entropy", *extra)


# ------------------------------------------------------------------------------------------ ~ in paths
def test_a_quoted_tilde_output_dir_is_the_home_folder_not_a_folder_named_tilde(tiny_bert, shared_data, home, capsys):
    assert istar_run(tiny(tiny_bert, shared_data, "output_dir=~/x")) == 0
    assert json.loads((home / "x" / "results.json").read_text())["step"] == 2
    assert not (home.parent / "cwd" / "~").exists() and os.listdir(home.parent / "cwd") == []
    assert f"results: {home / 'x' / 'results.json'}" in capsys.readouterr().out.splitlines()


def test_every_path_key_is_expanded_when_the_config_is_composed(home):
    shutil.copy(find_yaml("movie_snippets"), home / "r.yaml")
    cfg = compose(["recipe=~/r.yaml", "output_dir=~/runs/x", "data.dir=~/data/sst2", "data.cache_dir=~/cache",
                   "init_from=~/runs/base", "model.name_or_path=~/models/bert", "data.train_file=~/t.tsv",
                   "data.eval_file=~/e.tsv"])
    assert (cfg.recipe, cfg.output_dir, cfg.init_from) == (f"{home}/r.yaml", f"{home}/runs/x", f"{home}/runs/base")
    assert (cfg.data.dir, cfg.data.cache_dir, cfg.data.train_file, cfg.data.eval_file) == (
        f"{home}/data/sst2", f"{home}/cache", f"{home}/t.tsv", f"{home}/e.tsv")
    assert cfg.model.name_or_path == f"{home}/models/bert"
    assert compose(["recipe=movie_snippets"]).output_dir == "runs/movie_snippets/istar/seed42"  # no ~: untouched


def test_a_tilde_of_no_user_is_refused_in_one_line_naming_it(home, capsys):
    with pytest.raises(ConfigError) as refused:
        compose(["recipe=movie_snippets", f"output_dir={NO_USER}/x"])
    assert str(refused.value) == (f"output_dir={NO_USER}/x: there is no user 'no_such_user_istar' on this machine to "
                                  f"expand {NO_USER}; write ./{NO_USER}/x for a folder of that name")
    assert istar_run(["recipe=movie_snippets", f"data.dir={NO_USER}/d", "--cfg"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"istar-run: error: data.dir={NO_USER}/d: there is no user 'no_such_user_istar' on this machine to expand "
        f"{NO_USER}; write ./{NO_USER}/d for a folder of that name"]
    with pytest.raises(LaunchError, match=f"^grid_dir={NO_USER}/g: there is no user"):
        parse([f"grid_dir={NO_USER}/g"])
    with pytest.raises(SystemExit):
        export_cli.main([f"{NO_USER}/run"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"istar-export: error: argument run_dir: {NO_USER}/run: there is no user 'no_such_user_istar' on this "
        f"machine to expand {NO_USER}; write ./{NO_USER}/run for a folder of that name")
    assert not (home.parent / "cwd" / NO_USER).exists()


def test_the_tools_path_arguments_expand_a_tilde(home, capsys):
    (home / "grid").mkdir()
    assert report_cli.main(["~/grid"]) == 2
    assert capsys.readouterr().err.startswith(f"istar-report: error: no cells under {home / 'grid'} ")
    assert export_cli.main(["~/absent"]) == 2
    assert capsys.readouterr().err.strip() == f"istar-export: error: {home / 'absent'}: not a directory"
    assert analyze_cli.main(["~/absent", "--out", "~/analysis"]) == 2
    assert capsys.readouterr().err.strip() == f"istar-analyze: error: {home / 'absent'}: not a directory"
    assert parse(["grid_dir=~/g"])[0].grid_dir == home / "g"
    assert grid_cli.main(["smoke", "grid_dir=~/g", "launcher=inline", "--dry-run"]) == 0
    assert f"cells in {home / 'g'};" in capsys.readouterr().out
    assert os.listdir(home.parent / "cwd") == []


# ------------------------------------------------------------------------------------------ damaged weights
def damaged_copy(tiny_bert, directory, how):
    """A copy of the tiny model whose model.safetensors is cut to 100 bytes, or has bytes of its header flipped."""
    shutil.copytree(tiny_bert, directory)
    weights = directory / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if how == "truncated":
        data = data[:100]
    else:
        data[20:30] = bytes(b ^ 0xFF for b in data[20:30])  # inside the JSON header (its length is the first 8 bytes)
    weights.write_bytes(bytes(data))
    return directory


@pytest.mark.parametrize("how, detail", [
    ("truncated", TRUNCATED),
    ("header", "Error while deserializing header: invalid UTF-8 in header"),
])
def test_a_damaged_model_safetensors_is_one_model_error_naming_the_file(tiny_bert, shared_data, tmp_path, capsys,
                                                                         how, detail):
    model = damaged_copy(tiny_bert, tmp_path / "model", how)
    code = istar_run(tiny_run_arguments(model, shared_data, f"output_dir={tmp_path / 'run'}", "max_steps=1"))
    err = capsys.readouterr().err
    assert code == 7 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("istar-run:")]
    assert line.startswith(f"istar-run: error: model {model}: its weights file {model / 'model.safetensors'} is "
                           f"damaged ({detail}")
    assert line.endswith("); re-download the model, or re-export it if istar-export or a run wrote it")


def test_init_from_a_damaged_model_folder_and_istar_embed_of_one_say_so(tiny_bert, shared_data, tmp_path, capsys):
    model = damaged_copy(tiny_bert, tmp_path / "model", "truncated")
    expected = (f"model {model}: its weights file {model / 'model.safetensors'} is damaged ({TRUNCATED}); "
                "re-download the model, or re-export it if istar-export or a run wrote it")
    assert istar_run(tiny(tiny_bert, shared_data, f"init_from={model}", f"output_dir={tmp_path / 'run'}")) == 7
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("istar-run:")] == [
        f"istar-run: error: {expected}"]
    code = embed_cli.main([str(model), "--sts", str(shared_data / "stsb"), "--fit", "dev", "--transforms", "none",
                           "--out", str(tmp_path / "embeddings")])
    err = capsys.readouterr().err
    assert code == 7 and "Traceback" not in err and err.splitlines()[-1] == f"istar-embed: error: {expected}"


def test_istar_analyze_of_a_run_whose_model_folder_is_damaged_skips_it_in_one_line(tiny_bert, shared_data, tmp_path,
                                                                                   capsys):
    run = tmp_path / "run"
    assert istar_run(tiny(tiny_bert, shared_data, f"output_dir={run}")) == 0
    weights = run / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    capsys.readouterr()
    assert analyze_cli.main([str(run), "--out", str(tmp_path / "analysis")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1] == (
        f"istar-analyze: skipped {run}: model {run / 'model'}: its weights file {weights} is damaged ({TRUNCATED}); "
        "re-download the model, or re-export it if istar-export or a run wrote it")


# ------------------------------------------------------------------------------------------ two grid invocations
def grid_file(tiny_bert, shared_data, directory, seeds):
    """A grid of tiny cells (one per seed, 3 steps each) for istar-grid."""
    arguments = tiny(tiny_bert, shared_data, "max_steps=3")
    path = directory / "tiny.yaml"
    path.write_text("fixed:\n" + "".join(f"  {a.split('=', 1)[0]}: '{a.split('=', 1)[1]}'\n" for a in arguments)
                    + f"sweep:\n  seed: {list(seeds)}\n")
    return path


def hold(run_dir):
    """Another live process holding ``run_dir``'s lock, as a second invocation running that cell does."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from istar_plugin.storage.lock import RunDirLock
        with RunDirLock({str(run_dir)!r}):
            print("held", flush=True)
            time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_cell_another_process_runs_is_left_to_it_neither_run_nor_failed(tiny_bert, shared_data, tmp_path, capsys):
    grid = grid_module.load(str(grid_file(tiny_bert, shared_data, tmp_path, [1, 2])))
    grid_dir = tmp_path / "grid"
    options, _ = parse(["launcher=inline"])
    planned = plan(grid, grid_dir)
    assert [p.status for p in planned] == ["pending", "pending"]
    holder = hold(grid_dir / "seed=1")  # it starts seed=1 after this invocation planned it
    try:
        launched = launch(grid, grid_dir, planned, options)
        assert launched.statuses == {"seed=1": "running in another invocation", "seed=2": "finished"}
        assert launched.failed == [] and not (grid_dir / "seed=1" / "results.json").exists()
        assert read_manifest(grid_dir)["cells"]["seed=1"]["status"] == "running in another invocation"
        command = [str(grid.source), "launcher=inline", f"grid_dir={grid_dir}"]
        capsys.readouterr()
        assert grid_cli.main(command) == 0  # planned while it is held: skipped as running, not started
        assert (f"0 cells finished, 0 failed, 1 skipped, 1 running in another invocation; manifest: "
                f"{grid_dir / 'manifest.json'}") in capsys.readouterr().out
        assert read_manifest(grid_dir)["submissions"][-1]["skipped"]["seed=1"].startswith(
            f"running in another invocation (host {os.uname().nodename}, pid {holder.pid}, since ")
        assert attempts(grid_dir / "seed=1") == []
    finally:
        holder.kill()
        holder.wait()
    assert grid_cli.main(command) == 0  # the other process is gone: this one runs it
    assert "1 cells finished, 0 failed, 1 skipped, 0 running in another invocation" in capsys.readouterr().out
    assert {name: entry["status"] for name, entry in read_manifest(grid_dir)["cells"].items()} == {
        "seed=1": "finished", "seed=2": "finished"}


@pytest.mark.slow  # two istar-grid processes, 3 tiny cells
def test_two_concurrent_invocations_run_every_cell_exactly_once(tiny_bert, shared_data, tmp_path):
    path = grid_file(tiny_bert, shared_data, tmp_path, [1, 2, 3])
    command = [sys.executable, "-m", "istar_plugin.cli.grid", str(path), "launcher=inline",
               f"grid_dir={tmp_path / 'grid'}"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    invocations = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=environment) for _ in range(2)]
    outputs = [invocation.communicate(timeout=600) for invocation in invocations]
    assert [invocation.returncode for invocation in invocations] == [0, 0], outputs
    assert not any("failed:" in out + err or "Traceback" in err for out, err in outputs), outputs
    summaries = [out.splitlines()[-1] for out, _ in outputs]
    counts = [[int(word) for word in summary.split(";")[0].replace(",", "").split() if word.isdigit()]
              for summary in summaries]  # finished, failed, skipped, running in another invocation
    assert sum(finished for finished, *_ in counts) == 3 and all(failed == 0 for _, failed, *_ in counts), summaries
    assert all(sum(count) == 3 for count in counts), summaries
    for seed in (1, 2, 3):
        cell = tmp_path / "grid" / f"seed={seed}"
        assert [a["event"] for a in attempts(cell)] == ["start", "finished"]
        assert json.loads((cell / "results.json").read_text())["step"] == 3
    assert {entry["status"] for entry in read_manifest(tmp_path / "grid")["cells"].values()} == {"finished"}
    assert len(read_manifest(tmp_path / "grid")["submissions"]) == 2  # neither invocation's record was lost


# ------------------------------------------------------------------------------------------ export of a failed run
def test_a_failed_runs_checkpoint_is_exported_only_to_out_and_says_what_it_is(tiny_bert, shared_data, tmp_path,
                                                                              capsys):
    run = tmp_path / "run"
    with pytest.raises(DivergedError):
        Trainer(compose(tiny(tiny_bert, shared_data, "optim.lr=1e6", "save_every=1", "max_steps=4",
                             f"output_dir={run}"))).fit()
    reason = json.loads((run / "results.json").read_text())["reason"]
    before, _ = sorted(path.name for path in run.iterdir()), capsys.readouterr()
    for extra in ([], ["--step", "1"]):
        assert export_cli.main([str(run), *extra]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"istar-export: error: {run}: the run failed ({reason}); its model/ is kept for a finished run's model: "
            "pass --out DIR to export its checkpoint step_00000001.pt anyway"]
    assert sorted(path.name for path in run.iterdir()) == before  # no model/, no model_step_1/
    out = tmp_path / "diverged-step1"
    assert export_cli.main([str(run), "--out", str(out)]) == 0
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
    Trainer(compose(tiny(tiny_bert, shared_data, "keep_checkpoints=1", f"output_dir={run}"))).fit()
    capsys.readouterr()
    assert export_cli.main([str(run)]) == 0
    assert capsys.readouterr().out.startswith(f"exported step 2 to {run / 'model'} (load with ")
    assert json.loads((run / "model" / "export.json").read_text()) == {
        "run": str(run), "run_state": "finished", "step": 2, "checkpoint": "checkpoints/step_00000002.pt",
        "finished_result": True}
