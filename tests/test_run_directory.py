"""A run directory: one lifecycle for both engines (training/run_directory.py), in which the trainer (engine istar) and
the sentence-transformers engine lock, mark, clean, log, refuse, record and stop the same way; and the files it holds,
written atomically (never half a file, no temporary left), the metrics log and TensorBoard's scalars."""
import json
import os
import signal
import socket

import numpy as np
import pytest
import torch
from helpers import four_step_run_arguments, lock_held_elsewhere
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from istar_plugin.cli import run as run_cli
from istar_plugin.config import compose
from istar_plugin.errors import ConfigError, RunDirError
from istar_plugin.storage import atomic as rundir
from istar_plugin.storage.atomic import atomic_torch_save, atomic_write_bytes, atomic_write_json, atomic_write_text
from istar_plugin.storage.lock import RunDirLock, held_here
from istar_plugin.storage.logs import MetricsLog, TensorBoardLog, flat_keys
from istar_plugin.storage.ownership import RUN_MARKER, mark
from istar_plugin.runtime.precision import choose_precision
from istar_plugin.training.trainer import Trainer

BOTH = ["istar", "sentence_transformers"]
RUN = {"task": "sst2", "criterion": {"name": "istar"}, "seed": 3, "model": {"name": "minilm"}}
STEPS = {"istar": 3, "sentence_transformers": 2}  # 24 examples in batches of 8; 32 pairs in batches of 16
LOSS = {"istar": "train/loss", "sentence_transformers": "loss"}  # the key of a step's training loss in metrics.jsonl


def tiny_overrides(engine, tiny_bert, shared_data, output_dir, *extra):
    common = [f"model.name_or_path={tiny_bert}", "data.source=files", "data.max_length=32", "progress=false",
              "log_every=1", "tensorboard=true", f"output_dir={output_dir}"]
    if engine == "istar":
        return ["recipe=sst2", "model=minilm", f"data.dir={shared_data / 'sst2'}", "data.max_train_samples=24",
                "data.max_eval_samples=16", "batch_size=8", "optim.grad_accum=1", "optim.epochs=1", *common, *extra]
    return ["recipe=stsb_st", f"data.dir={shared_data / 'stsb'}", "data.max_train_samples=32",
            "data.max_eval_samples=16", "batch_size=16", *common, *extra]


def tiny_config(*arguments):
    return compose(tiny_overrides(*arguments))


def fit(cfg):
    """Trains ``cfg`` with its engine (skipped where sentence-transformers is not installed)."""
    if cfg.engine == "istar":
        return Trainer(cfg).fit()
    return pytest.importorskip("istar_plugin.integrations.st_engine").SentenceTransformersEngine(cfg).fit()


@pytest.fixture(scope="module", params=BOTH)
def restarted(request, tiny_bert, shared_data, tmp_path_factory):
    """A run killed before its first checkpoint (its config.yaml, two logged steps, the temporary of an interrupted
    atomic write), run again to the end with precision=auto."""
    engine = request.param
    run = tmp_path_factory.mktemp(engine) / "run"
    run.mkdir()
    (run / "config.yaml").write_text("task: killed\n")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": step, LOSS[engine]: 9.0, "time": 0.0}) + "\n"
                                               for step in (1, 2)))
    (run / ".results.json.0123abcd.tmp").write_text("{")
    results = fit(tiny_config(engine, tiny_bert, shared_data, run, "precision=auto", "seed=4"))
    return engine, run, results


def test_a_restarted_run_logs_each_step_once(restarted):
    engine, run, _ = restarted
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [record["step"] for record in records if LOSS[engine] in record] == list(range(1, STEPS[engine] + 1))
    assert 9.0 not in [record[LOSS[engine]] for record in records if LOSS[engine] in record]


def test_the_temporaries_of_a_killed_write_are_removed(restarted):
    _, run, _ = restarted
    assert not list(run.glob("*.tmp")) and json.loads((run / "results.json").read_text())["status"] == "finished"


def test_the_marker_names_task_criterion_and_seed(restarted):
    engine, run, results = restarted
    marker = json.loads((run / ".istar-run").read_text())
    task, criterion = ("sst2", "istar") if engine == "istar" else ("stsb", "cross_entropy")
    assert (marker["task"], marker["criterion"], marker["seed"]) == (task, criterion, 4) == (
        results["task"], results["criterion"]["name"], results["seed"])


def test_precision_auto_is_the_trainers_choice(restarted):
    _, run, results = restarted
    expected = choose_precision("auto", torch.device("cpu"))  # bf16 on a CPU with native bf16, else fp32
    assert results["precision"] == expected == json.loads((run / "results.json").read_text())["precision"]


def test_a_finished_run_is_returned_again_and_another_config_over_it_refused(restarted, tiny_bert, shared_data):
    engine, run, results = restarted
    again = fit(tiny_config(engine, tiny_bert, shared_data, run, "precision=auto", "seed=4"))
    assert again["step"] == results["step"] == STEPS[engine] and again["metrics"] == results["metrics"]
    with pytest.raises(RunDirError, match=r"holds the results of a different run \(changed: seed 4 then, 5 now\)"):
        fit(tiny_config(engine, tiny_bert, shared_data, run, "precision=auto", "seed=5"))
    assert json.loads((run / "results.json").read_text())["seed"] == 4  # the finished run is kept


@pytest.mark.parametrize("engine", BOTH)
def test_fp16_on_a_cpu_is_refused(engine, tiny_bert, shared_data, tmp_path):
    with pytest.raises(ConfigError, match="precision=fp16 needs a GPU; use fp32 or bf16 on CPU"):
        fit(tiny_config(engine, tiny_bert, shared_data, tmp_path / "run", "precision=fp16", "device=cpu"))
    assert not (tmp_path / "run" / ".lock").exists()


def signal_at_first_step(monkeypatch, engine, error=None):
    """SIGTERM to this process (or ``error`` raised) during the first training step."""
    if engine == "istar":
        from istar_plugin.training.step import OptimizerStep as owner

        name = "__call__"
    else:
        owner = pytest.importorskip("sentence_transformers").SentenceTransformerTrainer

        name = "training_step"
    original = getattr(owner, name)

    def step(*args, **kwargs):
        if error is not None:
            raise error
        result = original(*args, **kwargs)
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # the signal would kill the test run
            raise AssertionError("training without a SIGTERM handler")
        os.kill(os.getpid(), signal.SIGTERM)
        return result

    monkeypatch.setattr(owner, name, step)


@pytest.mark.parametrize("engine", BOTH)
def test_sigterm_ends_the_run_with_the_trainers_line(engine, tiny_bert, shared_data, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    signal_at_first_step(monkeypatch, engine)
    assert run_cli.main(tiny_overrides(engine, tiny_bert, shared_data, run)) == 143  # 128 + SIGTERM
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("istar-run: error: ")]
    line = f"istar-run: error: stopped by SIGTERM after step 1 of {STEPS[engine]} (epoch 1); "
    assert len(lines) == 1 and lines[0].startswith(line) and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    if engine == "istar":  # resumable from its checkpoint
        assert (run / "checkpoints" / "step_00000001.pt").is_file() and not (run / "results.json").exists()
    else:  # nothing to resume from: the record says why it ended
        record = json.loads((run / "results.json").read_text())
        assert record["status"] == "failed" and lines[0].endswith(record["reason"])
    assert not (run / ".lock").exists()


def test_the_engine_records_a_failure_when_it_raises(tiny_bert, shared_data, tmp_path, monkeypatch):
    run = tmp_path / "run"
    signal_at_first_step(monkeypatch, "sentence_transformers", error=RuntimeError("out of memory"))
    with pytest.raises(RuntimeError, match="out of memory"):
        fit(tiny_config("sentence_transformers", tiny_bert, shared_data, run))
    record = json.loads((run / "results.json").read_text())
    assert record["status"] == "failed" and record["reason"] == "out of memory" and "metrics" not in record


def test_a_run_directory_opens_cleans_logs_and_records(tmp_path):
    from omegaconf import OmegaConf

    from istar_plugin.training.run_directory import RunDirectory  # here: the engine tests also run on older trees

    path = tmp_path / "run"
    marker = mark(path, RUN_MARKER).read_text()  # the marker of a run started earlier (here without details)
    (path / ".config.yaml.0123abcd.tmp").write_text("half")
    (path / "checkpoints").mkdir()
    (path / "checkpoints" / ".step_00000002.pt.89abcdef.tmp").write_bytes(b"half")
    run = RunDirectory(path, is_main=True, tensorboard=False).open()
    assert not list(path.rglob("*.tmp")) and (path / ".lock").is_file()
    run.start(OmegaConf.create(RUN))
    assert (path / RUN_MARKER).read_text() == marker  # kept: it says when the run first started
    assert OmegaConf.load(path / "config.yaml").seed == 3
    for step in (1, 2):
        run.log({"train/loss": float(step)}, step)
    kept = run.metrics_bytes()
    run.log({"train/loss": 3.0}, 3)
    run.restart_logs(step=2, metrics_bytes=kept)  # resumed from step 2: step 3 is logged again
    assert [record["step"] for record in run.metrics.records()] == [1, 2]
    run.write_failure("out of memory", OmegaConf.create(RUN))
    run.close()
    record = json.loads((path / "results.json").read_text())
    assert (record["status"], record["reason"], record["seed"]) == ("failed", "out of memory", 3)
    assert not (path / ".lock").exists()


def test_a_run_directory_refuses_a_folder_it_did_not_write(tmp_path):
    from istar_plugin.training.run_directory import RunDirectory

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="holds files istar_plugin did not write"):
        RunDirectory(tmp_path, is_main=True, tensorboard=False).open()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_other_ranks_share_the_directory_but_write_nothing(tmp_path):
    from omegaconf import OmegaConf

    from istar_plugin.training.run_directory import RunDirectory  # here: the engine tests also run on older trees

    run = RunDirectory(tmp_path / "run", is_main=False, tensorboard=True).open()
    run.start(OmegaConf.create(RUN))
    run.log({"train/loss": 1.0}, 1)
    run.write_failure("boom", OmegaConf.create(RUN))
    run.close()
    assert not (tmp_path / "run").exists() and run.metrics_bytes() is None


# ---------------------------------------------------------------------------------- one run at a time
def listing(directory):
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


def test_a_second_run_into_a_held_directory_is_refused_at_once_naming_the_holder(tiny_bert, shared_data, tmp_path,
                                                                                   istar_run):
    run = tmp_path / "run"
    with lock_held_elsewhere(run) as pid:  # a real process, killed at the end: the OS releases its lock
        with pytest.raises(RunDirError, match=rf"output_dir {run} is in use by another run \(host "
                                              rf"{socket.gethostname()}, pid {pid}, since .*\); wait for it"):
            Trainer(compose(four_step_run_arguments(tiny_bert, shared_data, run)))
        done = istar_run(*four_step_run_arguments(tiny_bert, shared_data, run))
        assert done.returncode == 4 and f"pid {pid}" in done.stderr and "Traceback" not in done.stderr
        assert listing(run) == [".lock"]  # the refused runs wrote nothing
    results = Trainer(compose(four_step_run_arguments(tiny_bert, shared_data, run))).fit()
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


def test_a_released_lock_removes_the_empty_folders_it_made_and_no_other(tmp_path):
    (tmp_path / "runs" / "sst2").mkdir(parents=True)
    with RunDirLock(tmp_path / "runs" / "sst2" / "istar" / "seed1"):  # makes istar/ and seed1/
        pass
    assert sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*")) == ["runs", "runs/sst2"]
    with RunDirLock(tmp_path / "new" / "istar" / "seed1"):
        (tmp_path / "new" / "istar" / "seed2").mkdir()  # another run's folder, made meanwhile: kept, and its parents
    assert sorted(path.relative_to(tmp_path).as_posix() for path in (tmp_path / "new").rglob("*")) == [
        "new/istar", "new/istar/seed2"]


def test_a_lock_released_more_often_than_acquired_leaves_the_other_holders_lock(tmp_path):
    run = tmp_path / "run"
    outer = RunDirLock(run).acquire()
    inner = RunDirLock(run)
    inner.acquire().acquire()  # shared twice
    for _ in range(3):
        inner.release()  # the third does nothing
    assert held_here(run) and (run / ".lock").exists()
    outer.release()
    outer.release()
    assert not held_here(run) and not run.exists()
    later = RunDirLock(run).acquire()  # another holder after the first released
    outer.release()
    assert held_here(run) and (run / ".lock").exists()
    later.release()
    assert not held_here(run) and not run.exists()


def test_a_refused_resume_leaves_no_file_behind(tiny_bert, shared_data, tmp_path):
    run = tmp_path / "run"
    Trainer(compose(four_step_run_arguments(tiny_bert, shared_data, run, "max_steps=1"))).fit()
    before = {path: path.stat().st_mtime_ns for path in run.rglob("*")}
    for overrides in (["resume=false"], ["optim.lr=0.5"]):
        with pytest.raises(RunDirError):
            Trainer(compose(four_step_run_arguments(tiny_bert, shared_data, run, "max_steps=1", *overrides))).fit()
    assert {path: path.stat().st_mtime_ns for path in run.rglob("*")} == before  # no new, changed or lock file


# --------------------------------------------------------------------------------- the files it holds
class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("cannot serialise")


def only_file(directory):
    """The single entry of ``directory`` (fails on stray temp files)."""
    entries = sorted(path.name for path in directory.iterdir())
    assert len(entries) == 1, entries
    return directory / entries[0]


def test_atomic_writes_leave_only_the_target(tmp_path):
    assert atomic_write_bytes(tmp_path / "a.bin", b"\x00\x01") == tmp_path / "a.bin"
    assert only_file(tmp_path).read_bytes() == b"\x00\x01"
    atomic_write_text(tmp_path / "a.bin", "héllo")
    assert only_file(tmp_path).read_text(encoding="utf-8") == "héllo"


def test_atomic_write_json_format(tmp_path):
    atomic_write_json(tmp_path / "c.json", {"b": 1, "a": [1, 2]})
    text = (tmp_path / "c.json").read_text()
    assert text == json.dumps({"a": [1, 2], "b": 1}, indent=2) + "\n"


def test_atomic_writes_respect_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "t.txt", "x")
    finally:
        os.umask(previous)
    assert (tmp_path / "t.txt").stat().st_mode & 0o777 == 0o644


def test_failed_torch_save_keeps_old_content_and_no_temp(tmp_path):
    target = tmp_path / "state.pt"
    atomic_torch_save({"step": 1}, target)
    with pytest.raises(RuntimeError, match="cannot serialise"):
        atomic_torch_save({"step": 2, "bad": Unpicklable()}, target)
    assert only_file(tmp_path) == target
    assert torch.load(target, weights_only=False) == {"step": 1}


def test_failed_json_keeps_old_content_and_no_temp(tmp_path):
    target = tmp_path / "c.json"
    atomic_write_json(target, {"ok": True})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"bad": object()})
    assert only_file(tmp_path) == target and json.loads(target.read_text()) == {"ok": True}


def test_failure_at_rename_removes_temp(tmp_path, monkeypatch):
    target = tmp_path / "a.txt"
    atomic_write_text(target, "old")

    def broken_replace(source, destination):
        raise OSError("disk went away")

    monkeypatch.setattr(rundir.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk went away"):
        atomic_write_text(target, "new")
    assert only_file(tmp_path) == target and target.read_text() == "old"


def test_metrics_log_appends_and_reopens(tmp_path):
    with MetricsLog(tmp_path) as log:
        written = log.append({"step": 1, "loss": 0.5})
        log.append({"step": 2, "loss": 0.25})
    assert isinstance(written["time"], float)
    with MetricsLog(tmp_path) as log:
        log.append({"step": 3, "loss": float("nan")})
        records = log.records()
    assert [record["step"] for record in records] == [1, 2, 3]
    assert records[0] == written and all("time" in record for record in records)


def test_metrics_log_takes_a_directory_or_the_file(tmp_path):
    assert MetricsLog(tmp_path).path == MetricsLog(tmp_path / "metrics.jsonl").path == tmp_path / "metrics.jsonl"
    assert MetricsLog(tmp_path / "eval.jsonl").path == tmp_path / "eval.jsonl"


def test_metrics_log_without_file_is_empty(tmp_path):
    assert MetricsLog(tmp_path / "not_yet").records() == []


def test_metrics_log_rejects_time_key(tmp_path):
    with pytest.raises(ValueError, match="already has a 'time' key"):
        MetricsLog(tmp_path).append({"time": 3})


def test_metrics_log_truncated_last_line(tmp_path):
    with MetricsLog(tmp_path) as log:
        log.append({"step": 1})
    with open(log.path, "ab") as handle:
        handle.write(b'{"step": 2, "lo')  # a crash mid-write
    with pytest.warns(UserWarning, match="truncated last line"):
        assert [record["step"] for record in log.records()] == [1]
    with MetricsLog(tmp_path) as resumed, pytest.warns(UserWarning, match="dropping a truncated last line"):
        resumed.append({"step": 2})
    assert [record["step"] for record in resumed.records()] == [1, 2]


def test_metrics_log_corrupt_middle_line_is_an_error(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        MetricsLog(tmp_path).records()


def test_tensorboard_scalars_read_back(tmp_path):
    log = TensorBoardLog(tmp_path)
    values = {"loss": 0.5, "isoscore": torch.tensor(0.25), "epoch": np.int64(1), "note": "x", "flag": True}
    log.scalars(values, 10, "train")
    log.scalars({"loss": 0.125}, step=20, prefix="train/")
    log.scalars({"accuracy": 0.75}, step=20)
    log.flush()
    log.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["accuracy", "train/epoch", "train/isoscore", "train/loss"]
    assert [(event.step, event.value) for event in events.Scalars("train/loss")] == [(10, 0.5), (20, 0.125)]
    assert [(event.step, event.value) for event in events.Scalars("train/isoscore")] == [(10, 0.25)]
    assert [(event.step, event.value) for event in events.Scalars("accuracy")] == [(20, 0.75)]


def test_tensorboard_disabled_writes_nothing(tmp_path):
    log = TensorBoardLog(tmp_path / "tb", enabled=False)
    assert not log.enabled
    log.scalars({"loss": 1.0}, step=1)
    log.flush()
    log.close()
    assert not (tmp_path / "tb").exists()


def test_flat_keys_dots_nested_mappings_and_keeps_an_empty_one():
    assert flat_keys({"optim": {"lr": 1}, "data": {}}) == {"optim.lr": 1, "data": {}}
