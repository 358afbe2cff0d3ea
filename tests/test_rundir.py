"""Run-directory files: atomic writes, the metrics log, checkpoint rotation and TensorBoard scalars."""
import json
import os

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from istar_plugin.storage import atomic as rundir
from istar_plugin.storage.atomic import atomic_torch_save, atomic_write_bytes, atomic_write_json, atomic_write_text
from istar_plugin.storage.checkpoints import Checkpoints
from istar_plugin.storage.logs import MetricsLog, TensorBoardLog


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


def test_checkpoints_prune_and_order(tmp_path):
    checkpoints = Checkpoints(tmp_path, keep_last=2)
    assert checkpoints.latest() is None and checkpoints.load_latest() is None
    for step in (5, 100_000_000, 20, 300):  # 100_000_000 has 9 digits: order is numeric, not by name
        path = checkpoints.save({"step": step, "rng": torch.get_rng_state()}, step=np.int64(step))
        assert path.name == f"step_{step:08d}.pt"
    assert sorted(path.name for path in (tmp_path / "checkpoints").iterdir()) == [
        "step_00000300.pt", "step_00000300.pt.sha256", "step_100000000.pt", "step_100000000.pt.sha256"]
    assert checkpoints.latest().name == "step_100000000.pt"
    state = checkpoints.load_latest()
    assert state["step"] == 100_000_000 and torch.equal(state["rng"], torch.get_rng_state())


def test_checkpoints_ignore_foreign_files(tmp_path):
    checkpoints = Checkpoints(tmp_path, keep_last=1)
    checkpoints.directory.mkdir()
    (checkpoints.directory / "step_99999999.pt.tmp").write_bytes(b"")
    (checkpoints.directory / "notes.txt").write_text("keep me")
    checkpoints.save({}, step=1)
    assert checkpoints.latest().name == "step_00000001.pt"
    assert (checkpoints.directory / "notes.txt").exists()


@pytest.mark.parametrize("keep_last", [0, -1, 1.5, True])
def test_checkpoints_bad_keep_last(tmp_path, keep_last):
    with pytest.raises(ValueError, match="keep_last must be an integer >= 1"):
        Checkpoints(tmp_path, keep_last=keep_last)


def test_checkpoints_bad_step(tmp_path):
    with pytest.raises(ValueError, match="step must be an integer >= 0, got -1"):
        Checkpoints(tmp_path).save({}, step=-1)


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
