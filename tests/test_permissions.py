"""The commands run by an ordinary user (uid 65534, ``nobody``) on files and folders that user may not read or write:
exactly one stderr line naming the path, the exit code of its error class, and (for istar-run) before any model loads.

As root, where ``chmod 000`` stops nothing, each command runs as uid 65534 through ``setpriv`` (or ``runuser``). When
that user cannot reach this interpreter or checkout (a Python installed under root's 0700 home, as pyenv does), the
command runs in a private mount namespace in which every such folder is overlaid, unchanged but searchable; nothing on
disk changes (scripts/unprivileged.py, which the error sweep runs its cases as that user with too). Not as root, the
tests run the commands as the user they are.
"""
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers import tiny_run_arguments

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # scripts/ is no package
from unprivileged import UID, Unavailable, command_wrapper

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300


def _unavailable(reason: str) -> None:
    """Skip, or fail under CI (``CI`` set), where these tests must run."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the permission tests", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def as_user():
    """``as_user(work, *command)``: the CompletedProcess of ``command`` run as uid 65534 (as root) or as this user,
    in ``work`` (a folder that user may search, whose ``home`` it owns), with HOME and caches in that home and the
    hub offline."""
    try:
        wrap = command_wrapper(sys.executable, ROOT)
    except Unavailable as reason:
        _unavailable(str(reason))

    def run(work: Path, *command: str) -> subprocess.CompletedProcess:
        home = work / "home"
        env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "HF_HOME": str(home / "hf"),
               "MPLCONFIGDIR": str(home / "mpl"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "OMP_NUM_THREADS": "1", "ISTAR_TRACEBACK": "0"}
        return subprocess.run(wrap([sys.executable, *command], work / ".overlays"), cwd=work, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)

    probe = tempfile.mkdtemp(prefix="istar-permissions-")
    try:
        os.chmod(probe, 0o755)
        _user_home(Path(probe))
        done = run(Path(probe), "-c", "import os, istar_plugin; print(os.getuid())")
    finally:
        shutil.rmtree(probe)
    expected = str(UID) if os.geteuid() == 0 else str(os.getuid())
    assert (done.returncode, done.stdout.strip()) == (0, expected), (
        f"cannot run this interpreter as uid {expected}: {shlex.join(done.args)}\n{done.stderr}")
    return run


def _user_home(work: Path) -> Path:
    return _owned(work / "home")


def _owned(folder: Path) -> Path:
    """``folder``, made and (as root) given to uid 65534."""
    folder.mkdir()
    if os.geteuid() == 0:
        os.chown(folder, UID, UID)
    return folder


@pytest.fixture
def work():
    """A folder uid 65534 may search (pytest's tmp_path is 0700 under root), removed afterwards, with ``home`` owned
    by that user."""
    folder = Path(tempfile.mkdtemp(prefix="istar-permissions-"))
    os.chmod(folder, 0o755)
    _user_home(folder)
    yield folder
    _give_back(folder)
    shutil.rmtree(folder)


def _give_back(path: Path) -> None:
    """The modes a test took away, given back (as an ordinary user, rmtree needs them)."""
    if path.is_symlink():
        return
    path.chmod(0o755 if path.is_dir() else 0o644)
    for child in path.iterdir() if path.is_dir() else ():
        _give_back(child)


@pytest.fixture
def data(work, shared_data):
    """``work/data/sst2`` holding the first 40 sentences of the shared SST-2 training and dev files."""
    folder = work / "data" / "sst2"
    folder.mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        lines = (shared_data / "sst2" / name).read_text(encoding="utf-8").splitlines(keepends=True)[:41]
        (folder / name).write_text("".join(lines), encoding="utf-8")
    for path in (work / "data", folder, *folder.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def _istar_run(as_user, work, data, *overrides):
    """istar-run on the files in ``data`` with the packaged MiniLM (nothing here gets as far as loading it)."""
    return as_user(work, "-m", "istar_plugin.cli",
                   *tiny_run_arguments(Path(), data.parent, "model.name_or_path=", *overrides))


def _one_line(done: subprocess.CompletedProcess, code: int, line: str) -> None:
    assert (done.returncode, done.stderr) == (code, line + "\n"), done.stderr


def test_an_unreadable_data_file_is_one_line_before_the_model_loads(as_user, work, data):
    (data / "train.tsv").chmod(0o000)
    done = _istar_run(as_user, work, data, f"output_dir={work / 'home' / 'run'}")
    _one_line(done, 3, f"istar-run: error: cannot read data file {data / 'train.tsv'}: permission denied "
                       "(check its mode and owner)")
    assert not (work / "home" / "run").exists()  # the refused run leaves no directory behind


def test_an_unreadable_data_folder_is_one_line(as_user, work, data):
    data.chmod(0o000)
    done = _istar_run(as_user, work, data, f"output_dir={work / 'home' / 'run'}")
    _one_line(done, 3, f"istar-run: error: cannot read data folder {data}: permission denied "
                       "(check its mode and owner)")


def test_a_data_file_in_a_folder_that_cannot_be_searched_names_the_folder(as_user, work, data):
    data.chmod(0o600)
    done = _istar_run(as_user, work, data, f"data.train_file={data / 'train.tsv'}",
                      f"output_dir={work / 'home' / 'run'}")
    _one_line(done, 3, f"istar-run: error: cannot read data file {data / 'train.tsv'}: permission denied on its "
                       f"folder {data} (check that folder's mode and owner)")


def test_an_unreadable_recipe_is_one_line(as_user, work, data):
    recipe = work / "recipe.yaml"
    shutil.copy(ROOT / "recipes" / "sst2.yaml", recipe)
    recipe.chmod(0o000)
    done = _istar_run(as_user, work, data, f"recipe={recipe}", f"output_dir={work / 'home' / 'run'}")
    _one_line(done, 2, f"istar-run: error: cannot read recipe {recipe}: permission denied (check its mode and owner)")


def test_an_output_dir_whose_parent_is_not_writable_is_one_line(as_user, work, data):
    parent = work / "not_mine"
    parent.mkdir(mode=0o755)  # root's (or, not as root, read-only below)
    if os.geteuid() != 0:
        parent.chmod(0o555)
    done = _istar_run(as_user, work, data, f"output_dir={parent / 'run'}")
    _one_line(done, 4, f"istar-run: error: output_dir {parent / 'run'} is not writable (Permission denied); "
                       "choose another output_dir")
    assert not (parent / "run").exists()


def test_an_unreadable_grid_file_is_one_line(as_user, work):
    grid = work / "grid.yaml"
    grid.write_text("sweep:\n  seed: [1, 2]\n")
    grid.chmod(0o000)
    done = as_user(work, "-m", "istar_plugin.cli.grid", str(grid), f"grid_dir={work / 'home' / 'grid'}", "--dry-run")
    _one_line(done, 2, f"istar-grid: error: cannot read grid file {grid}: permission denied (check its mode and owner)")


def _finished_cell(cell: Path) -> Path:
    """A finished run's config.yaml and results.json in ``cell`` (made with its parents, readable by all)."""
    cell.mkdir(parents=True)
    (cell / "config.yaml").write_text("task: sst2\nseed: 1\n")
    (cell / "results.json").write_text(
        '{"task": "sst2", "model": "bert", "seed": 1, "step": 4, "epoch": 1, "criterion": {"name": "cross_entropy"}, '
        '"main_metric": "accuracy", "metrics": {"accuracy": 0.9, "eval_isoscore_star": 0.2}, '
        '"eval_isoscore_star": 0.2}')
    for path in (cell.parent, cell, *cell.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return cell


def test_istar_report_on_an_unreadable_results_json_is_one_line_and_writes_no_report(as_user, work):
    grid = _owned(work / "home" / "grid")  # the user could write the report here
    cell = _finished_cell(grid / "seed1")
    (cell / "results.json").chmod(0o000)
    done = as_user(work, "-m", "istar_plugin.cli.report", str(grid))
    _one_line(done, 4, f"istar-report: error: cannot read run record {cell / 'results.json'}: permission denied "
                       "(check its mode and owner)")
    assert not (grid / "report").exists()


def test_istar_report_on_a_grid_folder_it_cannot_list_is_one_line_not_cells_left_out(as_user, work):
    grid = _owned(work / "home" / "grid")
    _finished_cell(grid / "a" / "seed1")
    _finished_cell(grid / "b" / "seed1")
    (grid / "b").chmod(0o000)
    done = as_user(work, "-m", "istar_plugin.cli.report", str(grid))
    _one_line(done, 4, f"istar-report: error: cannot read grid folder {grid / 'b'}: permission denied "
                       "(check its mode and owner)")


@pytest.mark.parametrize("log", ["metrics.jsonl", "attempts.jsonl"])
def test_istar_report_on_an_unreadable_run_log_is_one_line_and_writes_no_report(as_user, work, log):
    grid = _owned(work / "home" / "grid")
    cell = _finished_cell(grid / "seed1")
    (cell / "metrics.jsonl").write_text('{"step": 4, "time": 1030}\n{"step": 4, "eval/accuracy": 0.9, "time": 1500}\n')
    (cell / log).write_text('{"step": 4, "time": 1030}\n')
    for path in cell.iterdir():
        path.chmod(0o000 if path.name == log else 0o644)
    done = as_user(work, "-m", "istar_plugin.cli.report", str(grid))
    _one_line(done, 4, f"istar-report: error: cannot read run log {cell / log}: permission denied "
                       "(check its mode and owner)")
    assert not (grid / "report").exists()
