"""Checkpoints: rotation keeps the newest ``keep_last`` in numeric step order beside foreign files, and bad settings are
refused; an exit raised while a checkpoint is being written (submitit's SIGUSR2 handler requeues a preempted job and
calls sys.exit; a second SIGTERM/SIGINT raises KeyboardInterrupt) leaves ``save_verified`` as that exit, not as the
RuntimeError torch's zip writer raises when it is closed mid-write (submitit would pickle that as the job's failed
result while the requeued job ran again)."""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import CrashAt, four_step_run_arguments

from istar_plugin.config import compose
from istar_plugin.errors import CheckpointError
from istar_plugin.storage import checkpoints
from istar_plugin.storage.checkpoints import Checkpoints
from istar_plugin.training.trainer import Trainer


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


@pytest.mark.parametrize("exit_error", [SystemExit(-1), KeyboardInterrupt("second SIGTERM: stopping at once")],
                         ids=["sys_exit", "keyboard_interrupt"])
def test_an_exit_raised_inside_a_checkpoint_write_leaves_save_verified_as_itself(tmp_path, monkeypatch, exit_error):
    write, calls = checkpoints._HashingWriter.write, []

    def exit_at_the_second_write(self, data):  # a signal handler's exit in torch.save's second write
        calls.append(len(data))
        if len(calls) == 2:
            raise exit_error
        return write(self, data)

    monkeypatch.setattr(checkpoints._HashingWriter, "write", exit_at_the_second_write)
    state = {"weights": torch.arange(4096, dtype=torch.float32), "step": 3}
    with pytest.raises(type(exit_error)) as raised:
        checkpoints.save_verified(state, tmp_path / "step_3.pt")
    assert raised.value is exit_error and len(calls) == 2
    assert list(tmp_path.iterdir()) == []  # no checkpoint, digest or temporary left

    monkeypatch.setattr(checkpoints._HashingWriter, "write", write)
    path = checkpoints.save_verified(state, tmp_path / "step_3.pt")  # the next save is whole
    assert checkpoints.problem(path) is None and torch.equal(torch.load(path)["weights"], state["weights"])


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
    straight = Trainer(compose(four_step_run_arguments(tiny_bert, shared_data, tmp_path / "straight"))).fit()
    cfg = compose(four_step_run_arguments(tiny_bert, shared_data, run, "save_every=1"))
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
