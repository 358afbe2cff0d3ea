"""Searches on a real PostgreSQL server (scripts/local_postgres.sh, started by .ci/run; found through
``$ISTAR_TEST_POSTGRES_URL``): two workers in separate processes on one study, one killed with SIGKILL mid-trial and
restarted (no trial twice, none lost, the database and the run directories agree), a server stopped mid-search and one
whose processes hang with a study open (one line naming the database, then the search resumes once the server is
back)."""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import optuna
import pytest
from test_search_workers import assert_study_and_directories_agree, progress, study_of, write_search

from istar_plugin.config.searches import load, trial_dir
from istar_plugin.errors import exit_code
from istar_plugin.launch.cell import latest_checkpoint_step
from istar_plugin.launch.study import open_search
from istar_plugin.storage import study_database

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "local_postgres.sh"
URL_ENV = "ISTAR_TEST_POSTGRES_URL"
WORKER = "import sys; from istar_plugin.launch.trial import SearchWorker; SearchWorker()(sys.argv[1], int(sys.argv[2]))"


def required(what: str) -> None:
    """Skip without ``what``; under CI (``CI=true``) fail, as a server CI starts must not turn into a skip."""
    message = f"needs {what}: bash scripts/local_postgres.sh start, then source /tmp/istar-plugin-postgres/env.sh"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{message}; CI=true requires it", pytrace=False)
    pytest.skip(message)


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server of ``server_url``; its URL."""
    psycopg = pytest.importorskip("psycopg")
    name = f"istar_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return server_url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def postgres_url():
    """A new database on the test server, dropped afterwards."""
    server_url = os.environ.get(URL_ENV)
    if not server_url:
        required(f"a PostgreSQL server (${URL_ENV} is not set)")
    url = fresh_database(server_url)
    yield url
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


def server_version(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as connection:
        return connection.execute("SHOW server_version").fetchone()[0]


def wait_for(condition, what, process=None, timeout_s=600):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended (exit {process.returncode}) before {what}: "
                                 f"{process.stderr.read().decode()[-2000:]}")
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def held_trial(search_dir: Path, worker: int):
    """The number of the trial ``worker`` started last, if any (from the search's progress.log)."""
    if not (search_dir / "progress.log").is_file():
        return None
    started = [line.split(": trial ")[1].split()[0] for line in progress(search_dir)
               if f" worker {worker}: trial " in line and " started: " in line]
    return int(started[-1]) if started else None


def start_worker(search_dir: Path, number: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WORKER, str(search_dir), str(number)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_two_workers_on_one_postgres_study_one_killed_mid_trial_and_restarted(
        tiny_bert, shared_data, tmp_path, postgres_url):
    trials = 4
    path = write_search(tmp_path, tiny_bert, shared_data, "optim.epochs=8", "save_every=1", trials=trials,
                        pruner="none", storage=postgres_url)
    search_dir = tmp_path / "search"
    open_search(load(str(path)), search_dir)
    first, second = start_worker(search_dir, 0), start_worker(search_dir, 1)
    wait_for(lambda: held_trial(search_dir, 0) is not None, "worker 0's first trial", first)
    killed = held_trial(search_dir, 0)
    run_dir = trial_dir(search_dir, killed) / "seed=1"
    wait_for(lambda: latest_checkpoint_step(run_dir) >= 2, "a checkpoint of worker 0's trial", first)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert not (run_dir / "results.json").exists()  # killed mid-trial
    restarted = start_worker(search_dir, 2)
    for worker in (second, restarted):
        assert worker.wait(timeout=900) == 0, worker.stderr.read().decode()[-3000:]
    _, study = study_of(search_dir)
    states = [t.state for t in study.trials]
    assert states == [optuna.trial.TrialState.COMPLETE] * trials, states  # none lost, none twice
    lines = progress(search_dir)
    for number in range(trials):  # each trial started once; the killed one resumed once, by another worker
        assert sum(f": trial {number} started: " in line for line in lines) == 1, lines
        assert sum(f": trial {number} resumed: " in line for line in lines) == (number == killed), lines
    assert_study_and_directories_agree(search_dir, trials)
    print(f"PostgreSQL {server_version(postgres_url)}: {trials} trials complete in the database "
          f"({len(study.trials)} rows), trial {killed} killed with SIGKILL in worker 0 and resumed")


@pytest.fixture
def own_server():
    """A PostgreSQL server of this test's own (stopped and started by it), from scripts/local_postgres.sh: its URL,
    the function running the script's actions on it, and its state folder."""
    if not os.environ.get(URL_ENV) or shutil.which("runuser") is None:
        required(f"a PostgreSQL installation (${URL_ENV} is not set)")
    state = Path(tempfile.mkdtemp(prefix="istar-pg-", dir="/tmp"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "ISTAR_POSTGRES_DIR": str(state), "ISTAR_POSTGRES_PORT": str(port)}

    def server(action):
        subprocess.run(["bash", str(SCRIPT), action], env=env, check=True, capture_output=True)

    server("start")
    try:
        yield fresh_database(f"postgresql://postgres@127.0.0.1:{port}/istar_test"), server, state
    finally:
        server("stop")
        shutil.rmtree(state, ignore_errors=True)


def test_a_server_stopped_mid_search_is_one_line_and_the_search_resumes_when_it_is_back(
        tiny_bert, shared_data, tmp_path, own_server):
    url, server, _ = own_server
    path = write_search(tmp_path, tiny_bert, shared_data, "optim.epochs=8", "save_every=1", trials=2, pruner="none",
                        storage=url, final_seeds=[1])
    search_dir = tmp_path / "search"
    command = [sys.executable, "-m", "istar_plugin.cli.tune", str(path), f"search_dir={search_dir}", "launcher=inline"]
    tune = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    run_dir = trial_dir(search_dir, 0) / "seed=1"
    wait_for(lambda: latest_checkpoint_step(run_dir) >= 1, "trial 0's first checkpoint", tune)
    server("stop")
    _, err = tune.communicate(timeout=600)
    lines = err.decode().splitlines()
    assert tune.returncode == 4, lines
    assert lines[-1].startswith(f"istar-tune: error: cannot use the study's database {url!r}: "), lines
    assert lines[-1].endswith("check that the database server runs and is reachable from this machine, then start "
                              "the search again (finished trials are kept, a stopped trial resumes)"), lines
    assert not any(line.startswith("Traceback") for line in lines), lines
    server("start")
    again = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                           timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "trial 0 resumed" in again.stdout
    assert_study_and_directories_agree(search_dir, 2)


def server_processes(state: Path) -> list[int]:
    """The processes of the server whose state folder is ``state``: its postmaster (``postmaster.pid``) and the
    postmaster's children."""
    postmaster = int((state / "data" / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(entry.name))
    return [postmaster, *children]


def test_a_server_hanging_with_a_study_open_is_one_line_after_the_statement_timeout_and_the_study_resumes(
        own_server, monkeypatch):
    url, _, state = own_server
    timeout_s = 5
    monkeypatch.setattr(study_database, "STATEMENT_TIMEOUT_S", timeout_s)
    study = optuna.create_study(storage=study_database.connect(url), study_name="hung")
    study.tell(study.ask(), 1.0)  # the study's pool now holds an open connection to the server
    outcome = {}

    def write():
        started = time.monotonic()
        try:
            with study_database.database_errors(url):
                study.tell(study.ask(), 2.0)
        except study_database.StudyDatabaseError as error:
            outcome["error"] = error
        outcome["seconds"] = time.monotonic() - started

    processes = server_processes(state)
    assert len(processes) > 1, processes  # the postmaster and the backends serving the study
    try:
        for pid in processes:
            os.kill(pid, signal.SIGSTOP)
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        # the watchdog cuts the pooled connection after the timeout, the pool's new connection times out connecting
        writer.join(timeout=timeout_s + study_database.CONNECT_TIMEOUT_S + 30)
        assert not writer.is_alive(), "the study's write still waits for the hung server"
    finally:
        for pid in processes:
            os.kill(pid, signal.SIGCONT)
    error = outcome["error"]
    assert exit_code(error) == 4
    assert str(error) == (f"cannot use the study's database {url!r}: the server stopped answering (a statement had no "
                          f"reply within {timeout_s} s); check that the database server runs and is reachable from "
                          "this machine, then start the search again (finished trials are kept, a stopped trial "
                          "resumes)")
    print(f"ended after {outcome['seconds']:.1f} s, exit {exit_code(error)}: {error}")
    study.tell(study.ask(), 3.0)  # the server answers again: the same storage goes on, with a new connection
    resumed = optuna.load_study(study_name="hung", storage=study_database.connect(url))
    assert [(t.state, t.value) for t in resumed.trials] == [(optuna.trial.TrialState.COMPLETE, 1.0),
                                                            (optuna.trial.TrialState.COMPLETE, 3.0)]
