"""A search's study database, without training: its faults (read-only, damaged, full, a server that accepts and never
answers) are one line naming the URL and what to do, and a study is bound to its search directory, search file and
data: a second directory on the same database and study name, or a search extended after its data changed, is
refused in one line that changes nothing."""
import json
import socket
import sqlite3

import optuna
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_search_files import refused, write_search

from istar_plugin.cli import report as report_cli
from istar_plugin.config.searches import Dimension, SearchError, SearchSpec, load
from istar_plugin.launch.study import BOUND_DATA, BOUND_DIR, open_search, sample
from istar_plugin.launch.tune import WORKERS, reserve_workers
from istar_plugin.storage import study_database
from istar_plugin.storage.study_database import StudyDatabaseError, database_errors, shown


def sst2_copy(folder, shared_data, rows=24):
    """A small SST-2 folder of the first ``rows`` training sentences (the search's data, editable)."""
    folder.mkdir()
    for name, count in (("train.tsv", rows), ("dev.tsv", 9)):
        lines = (shared_data / "sst2" / name).read_text().splitlines(keepends=True)[:count]
        (folder / name).write_text("".join(lines))
    return folder


def sst2_search(tmp_path, data, **content):
    fixed = {"recipe": "sst2", "model": "minilm", "data.source": "files", "data.dir": str(data),
             "data.validation_split": 0.25, "data.max_length": 32}
    return write_search(tmp_path, fixed=fixed, space={"optim.lr": {"low": 1e-5, "high": 1e-4, "log": True}},
                        trials=2, **content)


def test_two_search_directories_on_one_database_and_study_name_are_refused(tmp_path, capsys):
    path = write_search(tmp_path, storage=f"sqlite:///{tmp_path / 'shared.db'}")
    first = open_search(load(str(path)), tmp_path / "first")
    assert first.user_attrs[BOUND_DIR] == str((tmp_path / "first").resolve())
    code, err = refused(capsys, path, f"search_dir={tmp_path / 'second'}", "launcher=inline")
    assert code == 2 and err == [f"istar-tune: error: the study s in sqlite:///{tmp_path / 'shared.db'} belongs to the "
                                 f"search in {tmp_path / 'first'}: run it there (search_dir={tmp_path / 'first'}), or "
                                 "give this search a storage= of its own; nothing was changed"]
    assert not (tmp_path / "second").exists()
    assert open_search(load(str(path), ["trials=6"]), tmp_path / "first").user_attrs == first.user_attrs


def test_a_search_extended_after_its_training_file_changed_is_refused(tmp_path, capsys, shared_data):
    data = sst2_copy(tmp_path / "data", shared_data)
    path = sst2_search(tmp_path, data)
    study = open_search(load(str(path)), tmp_path / "search")
    assert set(study.user_attrs[BOUND_DATA]) == {"train", "eval"}
    open_search(load(str(path), ["trials=3"]), tmp_path / "search")  # the same data: extended
    lines = (data / "train.tsv").read_text().splitlines(keepends=True)
    lines[3] = lines[3][:-2] + ("1\n" if lines[3].endswith("0\n") else "0\n")  # one label flipped
    (data / "train.tsv").write_text("".join(lines))
    before = sorted(p.name for p in (tmp_path / "search").iterdir())
    code, err = refused(capsys, path, f"search_dir={tmp_path / 'search'}", "trials=4", "launcher=inline")
    assert code == 2 and len(err) == 1
    assert err[0].startswith("istar-tune: error: the data of search s changed since its first trials: train (")
    assert err[0].endswith("their content differs); new trials would be scored on other data than the old: restore "
                           "the data, or search the new data in a new search_dir=")
    assert sorted(p.name for p in (tmp_path / "search").iterdir()) == before


def test_a_study_made_by_another_search_file_is_refused(tmp_path):
    path = write_search(tmp_path)
    study = open_search(load(str(path)), tmp_path / "search")
    study.set_user_attr("search", {**study.user_attrs["search"], "seeds": [7]})
    with pytest.raises(SearchError, match=r"was made by another search file \(differs at seeds\): restore it"):
        open_search(load(str(path)), tmp_path / "search")


@pytest.mark.parametrize("damage, reason, advice", [
    ("read-only", "attempt to write a readonly database", "make it writable by this user, or set storage= to a "
                                                          "database this user can write"),
    ("garbage", "file is not a database", "it is damaged: restore it from a copy, or start a new search_dir"),
    ("full", "database or disk is full", "free space on its disk, then start the search again (its trials are "
                                         "kept)"),
])
def test_a_faulty_sqlite_study_is_one_line_naming_it_and_what_to_do(tmp_path, damage, reason, advice):
    path = write_search(tmp_path)
    open_search(load(str(path)), tmp_path / "search")
    database = tmp_path / "search" / "study.db"
    url = f"sqlite:///{database}"

    def connection():  # the study's file as this user would find it (SQLite's own page limit: a full disk)
        if damage == "read-only":
            return sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        opened = sqlite3.connect(database)
        if damage == "full":
            opened.execute("PRAGMA max_page_count = " + str(opened.execute("PRAGMA page_count").fetchone()[0]))
        return opened

    if damage == "garbage":
        database.write_bytes(b"not a database at all" * 300)
    with pytest.raises(StudyDatabaseError) as raised:
        with database_errors(url):
            storage = optuna.storages.RDBStorage(url, engine_kwargs={"creator": connection})
            study = optuna.load_study(study_name="s", storage=storage)
            for _ in range(200):
                study.tell(study.ask(), 1.0)
    assert str(raised.value) == f"cannot use the study's database {url!r}: {reason}; {advice}"
    assert raised.value.exit_code == 4


def damaged_pages(database):
    data = bytearray(database.read_bytes())
    data[4096:] = b"\xa5" * (len(data) - 4096)  # every page after the first (its header kept)
    database.write_bytes(bytes(data))


def damaged_journal_line(journal):
    lines = journal.read_text().splitlines(keepends=True)
    lines[1] = '{"op_code": 2, "study_id"\n'  # a record cut short, records after it
    journal.write_text("".join(lines))


@pytest.mark.parametrize("storage, damage, reason", [
    (None, lambda db: db.write_bytes(b"no database" * 99), "file is not a database"),
    (None, damaged_pages, "database disk image is malformed"),
    (None, lambda db: db.write_bytes(b""), "it is an empty file, not a database"),  # a new study it would be
    ("journal", damaged_journal_line, "its line 2 is damaged (Expecting ':' delimiter at column 26)"),
])
def test_istar_report_and_istar_tune_say_the_same_line_of_a_damaged_study(tmp_path, capsys, storage, damage, reason):
    database = tmp_path / ("s.journal" if storage else "search/study.db")
    path = write_search(tmp_path, **({"storage": f"journal:{database}"} if storage else {}))
    open_search(load(str(path)), tmp_path / "search")
    damage(database)
    url = f"journal:{database}" if storage else f"sqlite:///{database}"
    line = (f"error: cannot open the study's database {url!r}: {reason}; it is damaged: restore it from a copy, or "
            "start a new search_dir")
    before = sorted(p.name for p in (tmp_path / "search").iterdir())
    assert refused(capsys, path, f"search_dir={tmp_path / 'search'}", "launcher=inline") == (4, [f"istar-tune: {line}"])
    assert report_cli.main([str(tmp_path / "search")]) == 4
    assert capsys.readouterr().err.splitlines() == [f"istar-report: {line}"]
    assert sorted(p.name for p in (tmp_path / "search").iterdir()) == before


def test_a_server_that_accepts_and_never_answers_ends_in_one_line(monkeypatch):
    pytest.importorskip("psycopg")
    monkeypatch.setattr(study_database, "CONNECT_TIMEOUT_S", 2)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        url = f"postgresql://me:secret@127.0.0.1:{server.getsockname()[1]}/studies"
        with pytest.raises(StudyDatabaseError) as raised:
            study_database.connect(url)
    assert str(raised.value).startswith(f"cannot open the study's database {shown(url)!r}: ")
    assert "timeout" in str(raised.value) and "secret" not in str(raised.value)
    assert str(raised.value).endswith("check that the database server runs and is reachable from this machine, then "
                                      "start the search again (finished trials are kept, a stopped trial resumes)")


@pytest.mark.parametrize("field, value", [("log", "false"), ("int", "yes"), ("log", 0)])
def test_a_dimension_flag_is_read_by_type_not_truthiness(tmp_path, capsys, field, value):
    space = {"optim.lr": {"low": 1e-5, "high": 1e-4, field: value}}
    path = write_search(tmp_path, space=space)
    code, err = refused(capsys, path, f"search_dir={tmp_path / 'search'}", "launcher=inline")
    assert (code, err) == (2, [f"istar-tune: error: space.optim.lr.{field} must be true or false (unquoted), got "
                               f"{value!r}"])
    assert not (tmp_path / "search").exists()


@given(seed=st.integers(0, 2 ** 16), sign=st.sampled_from(["positive", "negative", "both"]))
def test_an_integer_range_gives_integers_whatever_its_sign(seed, sign):
    spec = SearchSpec("h", ("recipe=rte",), (Dimension("eval_every", 1, 40, log=True, sign=sign, integer=True),))
    value = sample(optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask(), spec)["eval_every"]
    assert isinstance(value, int) and 1 <= abs(value) <= 40
    assert {"positive": value > 0, "negative": value < 0, "both": True}[sign]


def test_launcher_slurm_without_sbatch_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    path = write_search(tmp_path)
    code, err = refused(capsys, path, f"search_dir={tmp_path / 'search'}", "slurm=local")
    assert (code, err) == (2, ["istar-tune: error: launcher=slurm needs SLURM's sbatch, which is not on this machine's "
                               "PATH: run on a machine of the cluster (e.g. its login node), or choose launcher=local "
                               "or launcher=inline; nothing was written"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_two_launchers_of_one_search_number_their_workers_apart(tmp_path):
    path = write_search(tmp_path)
    open_search(load(str(path)), tmp_path / "search")
    assert reserve_workers(tmp_path / "search", "local", 2) == [0, 1]
    assert reserve_workers(tmp_path / "search", "inline", 1) == [2]
    assert reserve_workers(tmp_path / "search", "slurm", 3) == [3, 4, 5]
    starts = json.loads((tmp_path / "search" / WORKERS).read_text())
    assert [(s["launcher"], s["workers"]) for s in starts] == [("local", [0, 1]), ("inline", [2]), ("slurm", [3, 4, 5])]


def test_a_shown_url_masks_its_password():
    assert shown("postgresql://me:secret@db.example/studies") == "postgresql://me:***@db.example/studies"
