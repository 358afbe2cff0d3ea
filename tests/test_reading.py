"""storage.reading and its callers: what root cannot be refused too (a folder named as a file, a file named as a
folder, not UTF-8, too large) is one line of the caller's error class naming the path; a missing file is left to the
caller. Permissions, which root bypasses, are tested as an unprivileged user in test_permissions.py."""
import errno

import pytest

from istar_plugin.config import compose
from istar_plugin.errors import ConfigError, DataError, RunDirError
from istar_plugin.launch.grid import GridError, load
from istar_plugin.reports.records.cells import collect
from istar_plugin.storage.reading import CONFIG_FILE_BYTES, cannot_read, read_text, reading
from istar_plugin.storage.results import read_results


def test_a_folder_a_file_under_a_file_and_bytes_that_are_not_utf8_are_named(tmp_path):
    with pytest.raises(DataError) as folder:
        read_text(tmp_path, "data file")
    assert str(folder.value) == f"cannot read data file {tmp_path}: it is a folder, not a file (name a file)"
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\nna\xefve\t1\n")
    with pytest.raises(DataError) as below_a_file:
        read_text(tmp_path / "train.tsv" / "dev.tsv", "data file")
    assert str(below_a_file.value) == (f"cannot read data file {tmp_path / 'train.tsv' / 'dev.tsv'}: a part of its "
                                       "path is not a folder")
    with pytest.raises(ConfigError) as not_utf8:
        read_text(tmp_path / "train.tsv", "recipe", ConfigError)
    assert str(not_utf8.value) == (f"cannot read recipe {tmp_path / 'train.tsv'}: not UTF-8 text (byte 0xef at "
                                   "offset 17); save it as UTF-8")


def test_a_missing_file_is_left_to_the_caller_and_other_errors_keep_their_cause(tmp_path):
    with pytest.raises(FileNotFoundError), reading(tmp_path / "nope.tsv", "data file"):
        (tmp_path / "nope.tsv").read_text()
    with pytest.raises(RunDirError, match=rf"^cannot read run record {tmp_path}/r: input/output error$"), \
            reading(tmp_path / "r", "run record", RunDirError):
        raise OSError(errno.EIO, "Input/output error")
    assert cannot_read(tmp_path, "data folder", NotADirectoryError(errno.ENOTDIR, "x")) == (
        f"cannot read data folder {tmp_path}: a part of its path is not a folder")


def test_a_recipe_that_is_a_folder_or_too_large_is_refused_before_it_is_parsed(tmp_path):
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(ConfigError) as folder:
        compose([f"recipe={tmp_path / 'folder.yaml'}"])
    # a folder is not a YAML file: the recipe is looked up by name and not found, as before
    assert str(folder.value).startswith(f"unknown recipe '{tmp_path / 'folder.yaml'}'; available: ")
    huge = tmp_path / "huge.yaml"
    huge.write_text("# " + "x" * CONFIG_FILE_BYTES + "\ntask: sst2\n")
    with pytest.raises(ConfigError) as too_large:
        compose([f"recipe={huge}"])
    assert str(too_large.value) == (f"cannot read recipe {huge}: {CONFIG_FILE_BYTES + 14} bytes is too large for a "
                                    f"recipe (at most {CONFIG_FILE_BYTES}); is it the right file?")


def test_a_grid_file_that_is_not_utf8_is_a_grid_error(tmp_path):
    (tmp_path / "g.yaml").write_bytes(b"sweep:\n  seed: [1, 2]\n# caf\xe9\n")
    with pytest.raises(GridError) as refused:
        load(str(tmp_path / "g.yaml"))
    assert str(refused.value) == (f"cannot read grid file {tmp_path / 'g.yaml'}: not UTF-8 text (byte 0xe9 at offset "
                                  "27); save it as UTF-8")


def test_a_results_json_that_is_a_folder_stops_the_report_instead_of_dropping_the_cell(tmp_path):
    cell = tmp_path / "grid" / "seed1"
    (cell / "results.json").mkdir(parents=True)  # not taken for a run directory holding a record
    (cell / "config.yaml").write_text("task: sst2\n")
    with pytest.raises(RunDirError) as refused:
        collect(tmp_path / "grid")
    path = cell / "results.json"
    assert str(refused.value) == f"cannot read run record {path}: it is a folder, not a file (name a file)"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "results.json").write_bytes(b"{\"task\": \"caf\xe9\"}")
    with pytest.raises(DataError, match="unreadable results.json: 'utf-8' codec can't decode byte 0xe9"):
        read_results(tmp_path / "other")  # a record that is not UTF-8 stays the run's problem, listed by a report
