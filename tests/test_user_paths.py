"""A ``~`` in a path is the home folder wherever a path is given (every path key of a config, the tools' path
arguments), never a folder named ``~``; a ``~user`` of no user on this machine is refused in one line naming it."""
import json
import os
import shutil

import pytest

from istar_plugin.cli import analyze as analyze_cli
from istar_plugin.cli import export as export_cli
from istar_plugin.cli import grid as grid_cli
from istar_plugin.cli import report as report_cli
from istar_plugin.cli.run import main as istar_run
from istar_plugin.config import compose, find_yaml
from istar_plugin.errors import ConfigError
from istar_plugin.launch.options import LaunchError, parse
from helpers import two_step_run_arguments

NO_USER = "~no_such_user_istar"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """``$HOME`` is ``tmp_path/home``; the current directory ``tmp_path/cwd``."""
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path / "home"


def test_a_quoted_tilde_output_dir_is_the_home_folder_not_a_folder_named_tilde(tiny_bert, shared_data, home, capsys):
    assert istar_run(two_step_run_arguments(tiny_bert, shared_data, "output_dir=~/x")) == 0
    assert json.loads((home / "x" / "results.json").read_text())["step"] == 2
    assert not (home.parent / "cwd" / "~").exists() and os.listdir(home.parent / "cwd") == []
    assert f"results: {home / 'x' / 'results.json'}" in capsys.readouterr().out.splitlines()


def test_every_path_key_is_expanded_when_the_config_is_composed(home):
    shutil.copy(find_yaml("sst2"), home / "r.yaml")
    cfg = compose(["recipe=~/r.yaml", "output_dir=~/runs/x", "data.dir=~/data/sst2", "data.cache_dir=~/cache",
                   "init_from=~/runs/base", "model.name_or_path=~/models/bert", "data.train_file=~/t.tsv",
                   "data.eval_file=~/e.tsv"])
    assert (cfg.recipe, cfg.output_dir, cfg.init_from) == (f"{home}/r.yaml", f"{home}/runs/x", f"{home}/runs/base")
    assert (cfg.data.dir, cfg.data.cache_dir, cfg.data.train_file, cfg.data.eval_file) == (
        f"{home}/data/sst2", f"{home}/cache", f"{home}/t.tsv", f"{home}/e.tsv")
    assert cfg.model.name_or_path == f"{home}/models/bert"
    assert compose(["recipe=movie_snippets"]).output_dir == "runs/movie_snippets/istar/seed42"  # no ~: untouched


def test_a_tilde_of_no_user_is_refused_in_one_line_naming_it(home, capsys):
    with pytest.raises(ConfigError) as refused:
        compose(["recipe=movie_snippets", f"output_dir={NO_USER}/x"])
    assert str(refused.value) == (f"output_dir={NO_USER}/x: there is no user 'no_such_user_istar' on this machine to "
                                  f"expand {NO_USER}; write ./{NO_USER}/x for a folder of that name")
    assert istar_run(["recipe=movie_snippets", f"data.dir={NO_USER}/d", "--cfg"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"istar-run: error: data.dir={NO_USER}/d: there is no user 'no_such_user_istar' on this machine to expand "
        f"{NO_USER}; write ./{NO_USER}/d for a folder of that name"]
    with pytest.raises(LaunchError, match=f"^grid_dir={NO_USER}/g: there is no user"):
        parse([f"grid_dir={NO_USER}/g"])
    with pytest.raises(SystemExit):
        export_cli.main([f"{NO_USER}/run"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"istar-export: error: argument run_dir: {NO_USER}/run: there is no user 'no_such_user_istar' on this "
        f"machine to expand {NO_USER}; write ./{NO_USER}/run for a folder of that name")
    assert not (home.parent / "cwd" / NO_USER).exists()


def test_the_tools_path_arguments_expand_a_tilde(home, capsys):
    (home / "grid").mkdir()
    assert report_cli.main(["~/grid"]) == 2
    assert capsys.readouterr().err.startswith(f"istar-report: error: no cells under {home / 'grid'} ")
    assert export_cli.main(["~/absent"]) == 2
    assert capsys.readouterr().err.strip() == f"istar-export: error: {home / 'absent'}: not a directory"
    assert analyze_cli.main(["~/absent", "--out", "~/analysis"]) == 2
    assert capsys.readouterr().err.strip() == f"istar-analyze: error: {home / 'absent'}: not a directory"
    assert parse(["grid_dir=~/g"])[0].grid_dir == home / "g"
    assert grid_cli.main(["smoke", "grid_dir=~/g", "launcher=inline", "--dry-run"]) == 0
    assert f"cells in {home / 'g'};" in capsys.readouterr().out
    assert os.listdir(home.parent / "cwd") == []
