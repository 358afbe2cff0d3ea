"""An exit raised while a checkpoint is being written (submitit's SIGUSR2 handler requeues a preempted job and calls
sys.exit; a second SIGTERM/SIGINT raises KeyboardInterrupt) leaves ``save_verified`` as that exit, not as the
RuntimeError torch's zip writer raises when it is closed mid-write: submitit pickles any Exception as the job's
result, so a requeued job read as failed and done while it ran again (a search test went on while its worker ran)."""
import pytest
import torch

from istar_plugin.storage import checkpoints


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
