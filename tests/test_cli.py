"""istar-run's command line: the hub checked before anything loads, files inferred from data.dir, output_dir of a
sweep as its grid directory, key=value after a flag; an expected failure is one line with its error class's exit code
(a traceback on request), a bug keeps its traceback."""
import os
import socket
import subprocess
import sys

import pytest
from helpers import error_lines, four_step_run_arguments

from istar_plugin.cli.run import main
from istar_plugin.config import ConfigError, compose
from istar_plugin.errors import DataError, run_command

OFFLINE_WAY = ("offline: model=minilm (installed with istar_plugin) or model.name_or_path=LOCAL_DIR; "
               "data.source=files data.dir=DIR")


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


def istar_run(*arguments, **env):
    command = [sys.executable, "-m", "istar_plugin.cli", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, **env})


@pytest.mark.parametrize("offline", ["0", "1"])
def test_unreachable_hub_is_one_line_naming_what_and_the_offline_way(tmp_path, offline):
    result = istar_run("recipe=squad", "criterion=istar", f"output_dir={tmp_path / 'run'}",
                                HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE=offline,
                                HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    assert result.returncode == 2  # at once: a hub that retried would outlast istar_run's timeout
    assert len(result.stderr.splitlines()) == 1, result.stderr
    line = result.stderr
    assert line.startswith("istar-run: error: cannot fetch model 'bert-base-cased' (model=bert) "
                           "and data set 'rajpurkar/squad' (data.source=hub)")
    assert ("HF_HUB_OFFLINE is set" if offline == "1" else "cannot be reached: [Errno 111] Connection refused") in line
    assert OFFLINE_WAY in line and "e.g. ../shared/data/squad" in line
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_unreachable_hub_names_only_what_is_missing(tmp_path):
    result = istar_run("recipe=squad", "model=minilm", HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    assert result.returncode == 2 and "cannot fetch data set 'rajpurkar/squad' (data.source=hub) from" in result.stderr
    assert "model '" not in result.stderr


def test_data_dir_means_files_and_contradictions_are_refused():
    assert compose(["recipe=sst2", "data.dir=/data/sst2"]).data.source == "files"  # the recipe says hub
    assert compose(["recipe=sst2", "data.train_file=/data/train.tsv"]).data.source == "files"
    assert compose(["recipe=sst2"]).data.source == "hub"
    with pytest.raises(ConfigError, match="data.dir is read only with data.source=files, not data.source=hub"):
        compose(["recipe=sst2", "data.source=hub", "data.dir=/data/sst2"])


def test_output_dir_of_a_sweep_is_its_grid_directory(tmp_path, capsys):
    assert main(["-m", "recipe=sst2", "seed=1,2", f"output_dir={tmp_path / 'grid'}", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"grid recipe=sst2: 2 cells in {tmp_path / 'grid'};")
    assert main(["-m", "recipe=sst2", "seed=1,2", "output_dir=a", "grid_dir=b", "--dry-run"]) == 2
    assert "give output_dir= or grid_dir= to a sweep, not both" in capsys.readouterr().err


def test_key_value_after_a_flag(capsys):
    assert main(["recipe=sst2", "--cfg", "model=gpt2", "seed=7"]) == 0
    shown = capsys.readouterr().out
    assert "name_or_path: gpt2" in shown and "seed: 7" in shown


def test_every_command_prints_an_expected_failure_in_one_line_and_lets_a_bug_show_its_traceback(tmp_path, capsys,
                                                                                               monkeypatch):
    """One error path: a RunError is ``istar-NAME: error: ...`` with its class's exit code; any other exception (a
    ValueError included) is a bug and propagates with its traceback."""
    from istar_plugin.analysis import sts_embeddings
    from istar_plugin.cli import analyze, embed, export, report
    from istar_plugin.training import export as exporting

    monkeypatch.setattr(exporting, "export_checkpoint", lambda *a: (_ for _ in ()).throw(ValueError("a bug")))
    with pytest.raises(ValueError, match="a bug"):
        export.main([str(tmp_path)])
    monkeypatch.setattr(sts_embeddings, "read_sts", lambda *a: [])
    monkeypatch.setattr(embed, "_fit_sentences", lambda *a: (_ for _ in ()).throw(ValueError("a bug")))
    with pytest.raises(ValueError, match="a bug"):
        embed.main(["minilm", "--sts", str(tmp_path), "--out", str(tmp_path / "out")])
    capsys.readouterr()
    for main_of, arguments, line in (
            (report.main, [str(tmp_path / "none")], f"istar-report: error: grid directory '{tmp_path / 'none'}' "
                                                     "does not exist"),
            (analyze.main, ["--base", "model=nope"], "istar-analyze: error: --base: unknown model 'nope'"),
            (embed.main, ["minilm", "--sts", str(tmp_path / "none")], f"istar-embed: error: --sts {tmp_path / 'none'}: "
                                                                         "no such folder")):
        assert main_of(arguments) in (2, 3)
        assert capsys.readouterr().err.splitlines()[-1].startswith(line)


def test_expected_failures_are_one_line_with_their_exit_code_and_a_traceback_on_request(tmp_path, istar_run):
    done = istar_run("recipe=movie_snippets", "batch_size=0")
    assert (done.returncode, done.stderr) == (
        2, "istar-run: error: batch_size=0 is out of range; allowed: 1 to 1048576\n")
    flagged = istar_run("recipe=movie_snippets", "batch_size=0", "--traceback")
    assert flagged.returncode == 2 and "Traceback (most recent call last)" in flagged.stderr
    assert flagged.stderr.endswith("istar-run: error: batch_size=0 is out of range; allowed: 1 to 1048576\n")
    by_environment = istar_run("recipe=movie_snippets", "batch_size=0", env={"ISTAR_TRACEBACK": "1"})
    assert "Traceback (most recent call last)" in by_environment.stderr
    missing_model = istar_run("recipe=movie_snippets", f"model.name_or_path={tmp_path / 'nowhere'}",
                              f"output_dir={tmp_path / 'run'}")
    assert missing_model.returncode == 7 and "Traceback" not in missing_model.stderr
    assert error_lines(missing_model.stderr)[0].startswith(
        f"istar-run: error: model '{tmp_path / 'nowhere'}' cannot be loaded")
    assert not (tmp_path / "run").exists()  # a refused run leaves no directory behind


def test_a_bad_data_file_fails_before_the_model_loads(tiny_bert, shared_data, tmp_path, istar_run):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nfine\t1\nhmm\tmaybe\n")
    done = istar_run(*four_step_run_arguments(tiny_bert, shared_data, tmp_path / "run",
                                              f"data.train_file={tmp_path / 'train.tsv'}"))
    assert done.returncode == 3
    assert done.stderr == (f"istar-run: error: {tmp_path / 'train.tsv'}, line 3: label 'maybe' is not in the label set "
                           "of sst2 (0=negative, 1=positive)\n")  # no model load report: the weights were never read


def test_bugs_keep_their_traceback():
    def buggy():
        return {}["missing"]

    with pytest.raises(KeyError):
        run_command("istar-run", buggy)
    assert run_command("istar-run", lambda: (_ for _ in ()).throw(DataError("x.tsv, line 2: bad"))) == 3
