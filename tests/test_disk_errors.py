"""A write the storage refuses (here a real file-size limit, RLIMIT_FSIZE: what a full disk or a quota does to a
write) is one line naming the file and the cause; the last intact checkpoint stays and no temporary is left."""
import contextlib
import resource
import signal

import pytest

from istar_plugin.config import compose
from istar_plugin.errors import RunDirError
from istar_plugin.storage.atomic import atomic_write_text
from istar_plugin.storage.checkpoints import problem
from istar_plugin.storage.logs import MetricsLog
from istar_plugin.training.trainer import Trainer
from helpers import CrashAt, tiny_run_arguments


@contextlib.contextmanager
def file_size_limit(size):
    """Files may not grow beyond ``size`` bytes in this process (writes past it fail with EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal that kills
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)



def test_atomic_and_appended_writes_past_the_limit_are_one_line_and_leave_the_old_file(tmp_path):
    target = tmp_path / "results.json"
    atomic_write_text(target, "old")
    log = MetricsLog(tmp_path)
    with file_size_limit(4096):
        with pytest.raises(RunDirError, match=rf"^{target}: cannot be written \(file too large\); "
                                              "the file it would have replaced, if any, is unchanged$"):
            atomic_write_text(target, "x" * 10_000)
        with pytest.raises(RunDirError, match=r"metrics.jsonl: cannot be written \(file too large\)"):
            log.append({"step": 1, "note": "y" * 10_000})
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [
        "metrics.jsonl", "results.json"]
    log.close()


def test_a_checkpoint_that_cannot_be_written_stops_the_run_keeping_the_last_intact_one(
        tiny_bert, shared_data, tmp_path):
    cfg = compose(tiny_run_arguments(tiny_bert, shared_data, "optim.grad_accum=1", f"output_dir={tmp_path / 'run'}",
                                     "tensorboard=false", "save_every=1"))
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, hooks=[CrashAt(2)]).fit()  # step 1's checkpoint is kept
    checkpoints = tmp_path / "run" / "checkpoints"
    first = checkpoints / "step_00000001.pt"
    assert first.stat().st_size > 1_000_000 and problem(first) is None
    with file_size_limit(1_000_000), pytest.raises(RunDirError) as refused:
        Trainer(cfg).fit()  # resumes, trains step 2, cannot write its checkpoint
    assert str(refused.value) == (f"{checkpoints / 'step_00000002.pt'}: cannot be written (file too large); the file "
                                  "it would have replaced, if any, is unchanged")
    assert problem(first) is None and sorted(p.name for p in checkpoints.iterdir()) == ["step_00000001.pt",
                                                                                       "step_00000001.pt.sha256"]
    # without the limit the run resumes from step 1 and finishes (4 epochs of 4)
    assert Trainer(cfg).fit()["step"] == 16


def test_an_export_that_cannot_be_written_is_one_line_and_leaves_nothing(tiny_bert, tmp_path):
    from istar_plugin.models.encoder import HFEncoder, ModelConfig
    from istar_plugin.training.export import export_model
    model = HFEncoder(ModelConfig(name_or_path=str(tiny_bert)), "classification")
    with file_size_limit(100_000), pytest.raises(
            RunDirError, match=rf"^{tmp_path / 'out'}: cannot be written \(file too large\)"):
        export_model(model, "classification", ("negative", "positive"), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []  # no half-written folder, no temporary


def test_atomic_writes_and_their_checksum_import_no_torch():
    """Reports and data write and hash files through storage.atomic without loading torch."""
    import subprocess
    import sys

    code = ("import sys, istar_plugin.storage.atomic as atomic, istar_plugin.data.packaged; "
            "assert 'torch' not in sys.modules, 'torch imported'; print(atomic.sha256_of(sys.executable)[:8])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
