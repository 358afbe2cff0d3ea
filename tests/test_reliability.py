"""Nothing wrong may look right: diverged runs, damaged checkpoints, shared run directories and bad input
fail early, in one line, with their own exit codes (real files, real processes)."""
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from helpers import CrashAt, tiny_run_arguments

from istar_plugin.cli.run import main
from istar_plugin.config import compose
from istar_plugin.data.task import clip_text
from istar_plugin.errors import CheckpointError, ConfigError, DataError, DivergedError, RunDirError, run_command
from istar_plugin.isotropy import isoscore_from_cov, isoscore_star
from istar_plugin.reports.records import cells as istar_cells
from istar_plugin.storage.checkpoints import Checkpoints
from istar_plugin.storage.lock import RunDirLock
from istar_plugin.training.divergence_guard import NonFiniteGuard
from istar_plugin.training.trainer import Trainer

TESTS = Path(__file__).resolve().parent


def tiny_arguments(tiny_bert, shared_data, output_dir, *extra):
    return tiny_run_arguments(tiny_bert, shared_data, "data.max_train_samples=16", "batch_size=4", "optim.grad_accum=1",
                              "optim.epochs=1", "max_steps=4", "log_every=1", "criterion=cross_entropy",
                              f"output_dir={output_dir}", *extra)


def tiny(tiny_bert, shared_data, output_dir, *extra):
    return compose(tiny_arguments(tiny_bert, shared_data, output_dir, *extra))


@pytest.fixture
def istar_run(capsys, monkeypatch):
    """``istar-run ARGUMENTS`` in this process, with ``env`` set for that call alone: its exit code and what it
    printed, as a ``subprocess.CompletedProcess``."""
    def run(*arguments, env=None):
        monkeypatch.delenv("ISTAR_TRACEBACK", raising=False)
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        code = main(list(arguments))
        captured = capsys.readouterr()
        for key in env or {}:
            monkeypatch.delenv(key)
        return subprocess.CompletedProcess(arguments, code, captured.out, captured.err)
    return run


def error_lines(stderr):
    """The tool's own lines (the model loader's progress bars and load report aside)."""
    return [line for line in stderr.splitlines() if line.startswith("istar-run:") or "Traceback" in line]


def listing(directory):
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


# ------------------------------------------------------------------------------------------ divergence
def test_a_diverged_run_exits_6_naming_the_step_and_is_reported_as_failed(tiny_bert, shared_data, tmp_path, istar_run):
    run = tmp_path / "grid" / "cell"
    done = istar_run(*tiny_arguments(tiny_bert, shared_data, run, "optim.lr=1e6", "save_every=1"))
    assert done.returncode == 6
    assert "Traceback" not in done.stderr
    [line] = error_lines(done.stderr)
    assert line.startswith("istar-run: error: the loss became nan at step 2 (gradient norm nan)")
    assert "likely cause: optim.lr=1000000.0 is far above fine-tuning rates" in line
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "failed" and results["reason"] == line.removeprefix("istar-run: error: ")
    assert "accuracy" not in results and "metrics" not in results and "eval_isoscore_star" not in results
    assert [p.name for p in (run / "checkpoints").glob("step_*.pt")] == ["step_00000001.pt"]  # none from step 2 on
    records, problems = istar_cells.collect(tmp_path / "grid")
    assert records == [] and [(Path(path).name, reason[:37]) for path, reason in problems] == [
        ("cell", "failed: the loss became nan at step 2")]


def test_divergence_with_istar_stops_before_any_evaluation_of_the_diverged_model(tiny_bert, shared_data, tmp_path):
    cfg = tiny(tiny_bert, shared_data, tmp_path / "run", "criterion=istar", "criterion.lam=-1",
               "criterion.shrinkage_points=200", "optim.lr=1e6", "eval_every=1", "log_every=100")
    with pytest.raises(DivergedError, match=r"at step 2 \(") as caught:
        Trainer(cfg).fit()
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r["step"] for r in history if "eval/accuracy" in r]
    assert evaluated == [0, 1]  # the step-2 evaluation (eval_every=1) never ran on the diverged weights
    assert json.loads((tmp_path / "run" / "results.json").read_text())["reason"] == str(caught.value)


def test_the_guard_names_the_first_non_finite_step_and_spends_the_fp16_patience():
    nan = torch.tensor(float("nan"))
    guard = NonFiniteGuard(torch.device("cpu"), patience=2)
    for step, loss in [(1, 0.5), (2, nan), (3, nan), (4, 0.4), (5, nan), (6, nan)]:
        guard.observe(step, torch.as_tensor(loss), torch.tensor(1.0))
    guard.check()  # two skipped steps at a time: within the patience
    guard.observe(7, nan, torch.tensor(1.0))
    with pytest.raises(DivergedError, match=r"^the loss became nan at step 5 \(gradient norm 1.0\) and stayed "
                                            r"non-finite for more than optim.overflow_patience=2 steps"):
        guard.check()
    infinite_norm = NonFiniteGuard(torch.device("cpu"))
    infinite_norm.observe(1, torch.tensor(0.25), torch.tensor(float("inf")))
    with pytest.raises(DivergedError, match=r"^the gradient norm became inf at step 1 \(loss 0.25\)"):
        infinite_norm.check()


@given(st.integers(2, 6), st.integers(0, 35), st.sampled_from([float("nan"), float("inf"), -float("inf")]))
def test_isoscore_of_a_non_finite_covariance_is_nan_never_a_number(dim, position, bad):
    cov = torch.eye(dim, dtype=torch.float64) * 2
    cov.view(-1)[position % (dim * dim)] = bad
    assert math.isnan(isoscore_from_cov(cov).item())
    points = torch.randn(20, dim)
    points[position % 20, position % dim] = bad
    assert math.isnan(isoscore_star(points).item())
    assert math.isnan(isoscore_star(points, torch.eye(dim), zeta=0.3).item())
    assert isoscore_from_cov(torch.zeros(dim, dim)).item() == 0  # no direction used: 0, as before


# ------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("overrides, message", [
    (["criterion=istar", "criterion.lam=nan"], r"criterion.lam=nan: config values must be finite numbers"),
    (["optim.lr=inf"], r"optim.lr=inf: config values must be finite"),
    (["optim.lr=0"], r"optim.lr=0.0 is out of range; allowed: > 0"),
    (["optim.lr=-1"], r"optim.lr=-1.0 is out of range; allowed: > 0"),
    (["batch_size=0"], r"batch_size=0 is out of range; allowed: 1 to 1048576$"),
    (["optim.grad_accum=0"], r"optim.grad_accum=0 is out of range; allowed: 1 to 1048576"),
    (["log_every=0"], r"log_every=0 is out of range"),
    (["eval_every=0"], r"eval_every=0 is out of range; allowed: 1 to 1000000000 or null"),
    (["save_every=-2"], r"save_every=-2 is out of range"),
    (["max_steps=-1"], r"max_steps=-1 is out of range; allowed: 1 to 1000000000 or null"),
    (["optim.epochs=0"], r"optim.epochs=0 is out of range; allowed: 1 to 1000000"),
    (["optim.warmup_ratio=2"], r"optim.warmup_ratio=2.0 is out of range; allowed: 0 to 1"),
    (["optim.max_grad_norm=-1"], r"optim.max_grad_norm=-1.0 is out of range; allowed: >= 0"),
    (["model.dropout=1.5"], r"model.dropout=1.5 is out of range; allowed: 0 <= dropout < 1, or null"),
    (["criterion=istar", "criterion.zeta=1.5"], r"criterion.zeta must lie in \[0, 1\], got 1.5"),
    (["device=tpu"], r"device='tpu' unknown; choose one of: auto, cpu, cuda, cuda:N, mps"),
    (["data.max_length=129"],
     r"data.max_length=129 exceeds the 128 positions of model .*tiny_bert.*; allowed: 8 to 128"),
    (["criterion=istar", "criterion.layers=[1,3]"], r"criterion.layers: index 3 is out of range for model .* "
                                                    r"with 2 layers; allowed: 0 \(embeddings\) to 2, or -3 to -1"),
    (["criterion=istar", "criterion.layers=[-4]"], r"index -4 is out of range"),
])
def test_bad_numbers_and_choices_are_refused_at_compose_time(tiny_bert, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose(["recipe=sst2", "model=minilm", f"model.name_or_path={tiny_bert}", "data.max_length=32",
                 f"output_dir={tmp_path}", *overrides])


@pytest.mark.parametrize("content, message", [
    ("", r"recipe .*r.yaml is empty or not a mapping"),
    ("- task\n- sst2\n", r"is empty or not a mapping"),
    ("task: sst2\n  batch_size: [32\n", r"recipe .*r.yaml cannot be read as YAML: .*line 2"),
])
def test_empty_or_malformed_recipes_are_refused(tmp_path, content, message):
    (tmp_path / "r.yaml").write_text(content)
    with pytest.raises(ConfigError, match=message):
        compose([f"recipe={tmp_path / 'r.yaml'}"])


# ------------------------------------------------------------------------------------------ one line, exit codes
def test_expected_failures_are_one_line_with_their_exit_code_and_a_traceback_on_request(tmp_path, istar_run):
    done = istar_run("recipe=movie_snippets", "batch_size=0")
    assert (done.returncode, done.stderr) == (
        2, "istar-run: error: batch_size=0 is out of range; allowed: 1 to 1048576\n")
    flagged = istar_run("recipe=movie_snippets", "batch_size=0", "--traceback")
    assert flagged.returncode == 2 and "Traceback (most recent call last)" in flagged.stderr
    assert flagged.stderr.endswith("istar-run: error: batch_size=0 is out of range; allowed: 1 to 1048576\n")
    by_environment = istar_run("recipe=movie_snippets", "batch_size=0", env={"ISTAR_TRACEBACK": "1"})
    assert "Traceback (most recent call last)" in by_environment.stderr
    missing_model = istar_run("recipe=movie_snippets", f"model.name_or_path={tmp_path / 'nowhere'}",
                              f"output_dir={tmp_path / 'run'}")
    assert missing_model.returncode == 7 and "Traceback" not in missing_model.stderr
    assert error_lines(missing_model.stderr)[0].startswith(
        f"istar-run: error: model '{tmp_path / 'nowhere'}' cannot be loaded")
    assert not (tmp_path / "run").exists()  # a refused run leaves no directory behind


def test_a_bad_data_file_fails_before_the_model_loads(tiny_bert, shared_data, tmp_path, istar_run):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nfine\t1\nhmm\tmaybe\n")
    done = istar_run(*tiny_arguments(tiny_bert, shared_data, tmp_path / "run",
                                     f"data.train_file={tmp_path / 'train.tsv'}"))
    assert done.returncode == 3
    assert done.stderr == (f"istar-run: error: {tmp_path / 'train.tsv'}, line 3: label 'maybe' is not in the label set "
                           "of sst2 (0=negative, 1=positive)\n")  # no model load report: the weights were never read


def test_bugs_keep_their_traceback():
    def buggy():
        return {}["missing"]

    with pytest.raises(KeyError):
        run_command("istar-run", buggy)
    assert run_command("istar-run", lambda: (_ for _ in ()).throw(DataError("x.tsv, line 2: bad"))) == 3


# ------------------------------------------------------------------------------------------ checkpoints
def saved_steps(tmp_path, steps=(1, 2, 3)):
    checkpoints = Checkpoints(tmp_path, keep_last=len(steps))
    for step in steps:
        checkpoints.save({"step": step, "weights": torch.randn(64)}, step)
    return checkpoints


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_newest_intact_one(tmp_path, damage):
    checkpoints = saved_steps(tmp_path)
    latest = checkpoints.latest()
    data = latest.read_bytes()
    latest.write_bytes({"flip": data[:500] + bytes([data[500] ^ 1]) + data[501:], "truncate": data[: len(data) // 2],
                        "empty": b""}[damage])
    with pytest.warns(UserWarning, match=r"step_00000003.pt is damaged \((its SHA-256 does not match|it is empty)"):
        state = checkpoints.load_latest()
    assert state["step"] == 2
    assert (checkpoints.directory / "step_00000003.pt.damaged").read_bytes() != data  # kept aside, never loaded again
    assert checkpoints.latest().name == "step_00000002.pt"


def test_a_checkpoint_without_checksum_that_cannot_be_loaded_falls_back_too(tmp_path):
    checkpoints = saved_steps(tmp_path)
    latest = checkpoints.latest()
    (checkpoints.directory / "step_00000003.pt.sha256").unlink()  # as written by an older version
    latest.write_bytes(latest.read_bytes()[:300])
    with pytest.warns(UserWarning, match=r"step_00000003.pt is damaged \(it cannot be loaded"):
        assert checkpoints.load_latest()["step"] == 2


def test_no_intact_checkpoint_is_a_checkpoint_error_naming_each(tmp_path):
    checkpoints = saved_steps(tmp_path, steps=(1, 2))
    for path in checkpoints.directory.glob("step_*.pt"):
        path.write_bytes(b"")
    with pytest.warns(UserWarning), pytest.raises(
            CheckpointError, match=r"no intact checkpoint to resume from "
                                   r"\(step_00000002.pt: it is empty.*step_00000001.pt: it is empty"):
        checkpoints.load_latest()


def test_a_run_resumes_past_a_damaged_checkpoint_and_removes_a_kill_s_temporary(tiny_bert, shared_data, tmp_path):
    run = tmp_path / "run"
    straight = Trainer(tiny(tiny_bert, shared_data, tmp_path / "straight")).fit()
    cfg = tiny(tiny_bert, shared_data, run, "save_every=1")
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, hooks=[CrashAt(3)]).fit()  # killed before step 3's checkpoint: steps 1 and 2 are kept
    latest = run / "checkpoints" / "step_00000002.pt"
    latest.write_bytes(latest.read_bytes()[:1000])
    writer = subprocess.Popen(  # a real process killed while it writes a checkpoint
        [sys.executable, "-c", "import sys, time\nfrom istar_plugin.storage.atomic import atomic_file\n"
         f"with atomic_file({str(run / 'checkpoints' / 'step_00000004.pt')!r}) as handle:\n"
         "    handle.write(b'x' * 4096); handle.flush(); print('writing', flush=True); time.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "writing\n"
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    assert [p.name for p in (run / "checkpoints").glob("*.tmp")]  # the kill left its temporary
    with pytest.warns(UserWarning, match="step_00000002.pt is damaged"):
        resumed = Trainer(cfg).fit()  # resumes from step 1
    assert not list(run.rglob("*.tmp"))
    assert resumed["step"] == 4 and resumed["metrics"] == straight["metrics"]


# ------------------------------------------------------------------------------------------ run directory
def hold_lock(directory):
    """A real process holding ``directory``'s lock until killed."""
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time\nfrom istar_plugin.storage.lock import RunDirLock\n"
                               f"RunDirLock({str(directory)!r}).acquire(); print('locked', flush=True); "
                               "time.sleep(300)\n"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    return holder


def test_a_second_run_into_a_held_directory_is_refused_at_once_naming_the_holder(tiny_bert, shared_data, tmp_path,
                                                                                   istar_run):
    run = tmp_path / "run"
    holder = hold_lock(run)
    try:
        with pytest.raises(RunDirError, match=rf"output_dir {run} is in use by another run \(host "
                                              rf"{socket.gethostname()}, pid {holder.pid}, since .*\); wait for it"):
            Trainer(tiny(tiny_bert, shared_data, run))
        done = istar_run(*tiny_arguments(tiny_bert, shared_data, run))
        assert done.returncode == 4 and f"pid {holder.pid}" in done.stderr and "Traceback" not in done.stderr
        assert listing(run) == [".lock"]  # the refused runs wrote nothing
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # the OS releases the lock of a killed holder
        holder.wait()
    results = Trainer(tiny(tiny_bert, shared_data, run)).fit()
    assert results["step"] == 4 and not (run / ".lock").exists()


def test_the_lock_is_shared_within_one_process_and_refuses_unwritable_directories(tmp_path):
    with RunDirLock(tmp_path / "run"):
        with RunDirLock(tmp_path / "run"):  # a grid cell's runner, then its Trainer
            pass
        assert (tmp_path / "run" / ".lock").exists()
    assert not (tmp_path / "run").exists()
    with pytest.raises(RunDirError, match=r"output_dir /sys/istar_run is not writable"):  # even for root
        RunDirLock("/sys/istar_run").acquire()
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirError, match=r"output_dir .*file \(or a parent\) exists and is not a directory"):
        RunDirLock(tmp_path / "file").acquire()


def test_a_refused_resume_leaves_no_file_behind(tiny_bert, shared_data, tmp_path):
    run = tmp_path / "run"
    Trainer(tiny(tiny_bert, shared_data, run, "max_steps=1")).fit()
    before = {path: path.stat().st_mtime_ns for path in run.rglob("*")}
    for overrides in (["resume=false"], ["optim.lr=0.5"]):
        with pytest.raises(RunDirError):
            Trainer(tiny(tiny_bert, shared_data, run, "max_steps=1", *overrides)).fit()
    assert {path: path.stat().st_mtime_ns for path in run.rglob("*")} == before  # no new, changed or lock file


# ------------------------------------------------------------------------------------------ long texts, CI
def test_long_texts_are_clipped_before_tokenisation_to_the_same_tokens(tiny_bert):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    words = "the film is a quietly ambitious , often funny portrait of grief ".split()
    text = " ".join(words[i % len(words)] for i in range(3000))
    assert len(clip_text(text, tokenizer, 32)) < len(text)
    full = tokenizer(text, truncation=True, max_length=32)["input_ids"]
    assert tokenizer(clip_text(text, tokenizer, 32), truncation=True, max_length=32)["input_ids"] == full
    megabyte = text * 50
    clipped = clip_text(megabyte, tokenizer, 32)
    tokenizer([clipped], [clipped], truncation=True, max_length=32)
    assert len(clipped) < 4096  # the tokenizer sees a few kilobytes, not the megabyte


def test_under_ci_missing_shared_data_fails_instead_of_skipping(tmp_path):
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_uses_data.py").write_text("def test_data(shared_data):\n    pass\n\n"
                                                "def test_other():\n    pass\n")
    environment = {**os.environ, "ISTAR_SHARED_DATA": str(tmp_path / "absent")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    local = subprocess.run(command, capture_output=True, text=True, env={**environment, "CI": ""}, cwd=tmp_path)
    assert local.returncode == 0 and "1 passed, 1 skipped" in local.stdout
    ci = subprocess.run(command, capture_output=True, text=True, env={**environment, "CI": "true"}, cwd=tmp_path)
    assert ci.returncode == 1 and "CI=true requires it" in ci.stdout and "1 passed, 1 error" in ci.stdout
