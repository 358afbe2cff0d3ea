"""Small parts several test modules share: the arguments of a tiny run, a hook that kills a run at a step, a
byte-level BPE for tiny decoders, a process holding a run directory's lock."""
import contextlib
import subprocess
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from istar_plugin.hooks import Hook


def tiny_run_arguments(model: Path, shared_data: Path, *overrides: str) -> list[str]:
    """``istar-run`` arguments for a run that takes seconds: the local model folder ``model`` (the ``tiny_bert`` or
    ``tiny_llama`` fixture) on 32 training and 8 evaluation examples of the shared SST-2 files, 32 tokens, batches
    of 8, no progress bars. Each ``key=value`` in ``overrides`` replaces the setting of that key in place, or is
    appended; ``key=`` (nothing after the sign) drops the key, e.g. ``model=`` to keep the recipe's own preset.

    >>> tiny_run_arguments(Path("/m"), Path("/data"), "batch_size=4", "log_every=1", "model=")[:2]
    ['recipe=sst2', 'model.name_or_path=/m']
    >>> tiny_run_arguments(Path("/m"), Path("/data"), "batch_size=4", "log_every=1")[-3:]
    ['batch_size=4', 'progress=false', 'log_every=1']
    """
    arguments = dict(argument.split("=", 1) for argument in (
        "recipe=sst2", "model=minilm", f"model.name_or_path={model}", "data.source=files",
        f"data.dir={shared_data / 'sst2'}", "data.max_train_samples=32", "data.max_eval_samples=8",
        "data.max_length=32", "batch_size=8", "progress=false"))
    for override in overrides:
        key, _, value = override.partition("=")
        arguments[key] = value
    return [f"{key}={value}" for key, value in arguments.items() if value != ""]


class CrashAt(Hook):
    """Simulates a killed job: raises once the given optimizer step is done."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, step, stats):
        if step == self.step:
            raise KeyboardInterrupt(f"simulated kill at step {step}")


def byte_level_bpe(shared_data, special: str, vocab_size: int = 400) -> Tokenizer:
    """A byte-level BPE trained on 2,000 SST-2 training sentences, with one special token (end of text)."""
    sentences = [line.split("\t")[0] for line in (shared_data / "sst2" / "train.tsv").read_text().splitlines()[1:2001]]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(sentences, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[special], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return bpe


@contextlib.contextmanager
def lock_held_elsewhere(path: Path):
    """A real process holding ``path``'s :class:`~istar_plugin.storage.lock.RunDirLock` until the block ends; yields
    its pid (what a second command on ``path`` sees while another runs there)."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from istar_plugin.storage.lock import RunDirLock\n"
                               "RunDirLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(120)",
                               str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def two_step_run_arguments(model: Path, shared_data: Path, *overrides: str) -> list[str]:
    """:func:`tiny_run_arguments` for a run of two steps of 4 of 16 training examples, without TensorBoard, trained
    with cross-entropy alone.

    >>> two_step_run_arguments(Path("/m"), Path("/data"), "max_steps=3")[-3:]
    ['max_steps=3', 'tensorboard=false', 'criterion=cross_entropy']
    """
    return tiny_run_arguments(model, shared_data, "data.max_train_samples=16", "batch_size=4", "optim.grad_accum=1",
                              "optim.epochs=1", "max_steps=2", "tensorboard=false", "criterion=cross_entropy",
                              *overrides)


def four_step_run_arguments(model: Path, shared_data: Path, output_dir: Path, *overrides: str) -> list[str]:
    """:func:`tiny_run_arguments` for a run into ``output_dir`` of four steps of 4 of 16 training examples, each step
    logged, trained with cross-entropy alone.

    >>> four_step_run_arguments(Path("/m"), Path("/data"), Path("/runs/a"), "max_steps=1")[-4:]
    ['max_steps=1', 'log_every=1', 'criterion=cross_entropy', 'output_dir=/runs/a']
    """
    return tiny_run_arguments(model, shared_data, "data.max_train_samples=16", "batch_size=4", "optim.grad_accum=1",
                              "optim.epochs=1", "max_steps=4", "log_every=1", "criterion=cross_entropy",
                              f"output_dir={output_dir}", *overrides)


def error_lines(stderr: str) -> list[str]:
    """istar-run's own lines of ``stderr`` (the model loader's progress bars and load report aside).

    >>> error_lines("Loading weights 100%\\nistar-run: error: bad\\n")
    ['istar-run: error: bad']
    """
    return [line for line in stderr.splitlines() if line.startswith("istar-run:") or "Traceback" in line]
