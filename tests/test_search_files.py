"""istar-tune's search files: their keys and the command line's, each refusal one line that writes nothing (a bad
key, range, pruner or seed list; an unknown search; a file that is not YAML or is a folder; a damaged record in a
search directory), the packaged searches composing, and ``base``: another search's keys, ``fixed`` merged key by
key, every other key replaced, an unknown base or a chain back to itself one line."""
import pytest
import yaml

from istar_plugin.cli import tune as cli
from istar_plugin.config.searches import SearchError, check, load, parse, read_search
from istar_plugin.launch.study import open_search

SPACE = {"criterion.lam": {"low": 0.1, "high": 10, "log": True, "sign": "both"},
         "criterion.zeta": {"choices": [0.2, 0.8]}}
FIXED = {"recipe": "movie_snippets", "criterion": "istar", "data.validation_split": 0.25}


def write_search(folder, **content):
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump({"fixed": FIXED, "space": SPACE, **content}))
    return path


def refused(capsys, *argv):
    """Run istar-tune; returns (exit code, its stderr lines)."""
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err.splitlines()


def test_the_grid_search_is_the_tpe_search_but_for_its_space_sampler_and_pruner():
    tpe, grid = load("sst2_minilm").as_dict(), load("sst2_minilm_grid").as_dict()
    differing = sorted(key for key in tpe if tpe[key] != grid[key])
    assert differing == ["description", "pruner", "sampler", "space"]
    assert (grid["sampler"], grid["pruner"], grid["trials"]) == ("grid", "none", 24)
    assert grid["space"]["criterion.lam"] == {"choices": [-1, -0.3, -0.1, 0.1, 0.3, 1]}


def test_fixed_overrides_merge_key_by_key_and_a_base_may_have_a_base(tmp_path):
    (tmp_path / "child.yaml").write_text("base: sst2_minilm_grid\nfixed: {optim.lr: 1.0e-4, data.max_length: 32}\n")
    (tmp_path / "grandchild.yaml").write_text(f"base: {tmp_path / 'child.yaml'}\ntrials: 6\n")
    spec = load(str(tmp_path / "grandchild.yaml"))
    fixed = spec.as_dict()["fixed"]
    assert (fixed["optim.lr"], fixed["data.max_length"], fixed["recipe"]) == ("0.0001", "32", "sst2")
    assert (spec.sampler, spec.trials, spec.name) == ("grid", 6, "grandchild")


def test_an_unknown_base_or_a_cycle_is_one_line(tmp_path):
    (tmp_path / "a.yaml").write_text(f"base: {tmp_path / 'b.yaml'}\n")
    (tmp_path / "b.yaml").write_text(f"base: {tmp_path / 'a.yaml'}\n")
    (tmp_path / "c.yaml").write_text("base: nonesuch\n")
    with pytest.raises(SearchError) as cycle:
        load(str(tmp_path / "a.yaml"))
    assert str(cycle.value) == f"search b: base {str(tmp_path / 'a.yaml')!r} leads back to itself (a -> b -> " \
                               f"{tmp_path / 'a.yaml'})"
    with pytest.raises(SearchError, match=r"^search c: base: unknown search 'nonesuch'; searches: lm_smollm2_lambda, "):
        load(str(tmp_path / "c.yaml"))


@pytest.mark.parametrize("content, line", [
    ({"trails": 4}, "istar-tune: error: search file {path}: unknown key 'trails'; keys: description, base, fixed, "
                    "space, seeds, trials, sampler, pruner, baseline, final_seeds, storage"),
    ({"space": {"criterion.lam": {"low": 1, "high": 0.1}}},
     "istar-tune: error: space.criterion.lam: low must be below high, got low=1, high=0.1"),
    ({"space": {"criterion.lam": {"low": -1, "high": 1, "log": True}}},
     "istar-tune: error: space.criterion.lam: a log range needs 0 < low (a signed range: sign: both), got low=-1"),
    ({"space": {"criterion.lam": {"low": 1, "high": 2, "scale": "log"}}},
     "istar-tune: error: space.criterion.lam: unknown field 'scale'; fields: low, high, log, sign, int, choices"),
    ({"space": {"criterion.lamda": {"low": 1, "high": 2}}},
     "istar-tune: error: a trial (criterion.lamda=1.0) is refused: command line: unknown key 'criterion.lamda'; "
     "allowed: distributed_cloud, lam, layers, name, padding, shrinkage_mode, shrinkage_points, zeta"),
    ({"space": {"criterion.zeta": {"low": 0.5, "high": 2}}},
     "istar-tune: error: a trial (criterion.zeta=2.0) is refused: criterion.zeta must lie in [0, 1], got 2.0"),
    ({"pruner": "hyperband"}, "istar-tune: error: pruner 'hyperband' unknown; choose one of: median, halving, none"),
    ({"seeds": [1, 1]}, "istar-tune: error: seeds names a seed twice: [1, 1]"),
    ({"fixed": {"recipe": "movie_snippets"}},
     "istar-tune: error: a search chooses on data held out of the training set: set data.validation_split (e.g. "
     "data.validation_split=0.1) in fixed or on the command line"),
    ({"storage": "redis://host/0"}, "istar-tune: error: storage 'redis://host/0' is no database URL; schemes: sqlite, "
                                    "postgresql, mysql, journal (sqlite:///PATH, postgresql://..., mysql://..., "
                                    "journal:PATH)"),
    ({"fixed": {**FIXED, "criterion.zeta": 0.2}},
     "istar-tune: error: criterion.zeta is both fixed and searched (seed: set seeds= instead); keep it in one place"),
])
def test_a_bad_search_file_is_one_line_and_writes_nothing(tmp_path, capsys, content, line):
    path = write_search(tmp_path, **content)
    code, err = refused(capsys, path, f"search_dir={tmp_path / 'search'}")
    assert (code, err) == (2, [line.format(path=path)])
    assert not (tmp_path / "search").exists()


def test_unknown_searches_keys_and_launch_options_are_refused_with_the_choices(tmp_path, capsys):
    path = write_search(tmp_path)
    assert refused(capsys, "nonesuch") == (2, ["istar-tune: error: unknown search 'nonesuch'; searches: "
                                               "lm_smollm2_lambda, rte_minilm, sst2_minilm, sst2_minilm_demo, "
                                               "sst2_minilm_grid"])
    assert refused(capsys, path, "optim.lr=-1") == (2, [
        "istar-tune: error: a trial (criterion.lam=-10.0, criterion.zeta=0.2) is refused: optim.lr=-1.0 is out of "
        "range; allowed: > 0"])
    assert refused(capsys, path, "workers=0") == (2, ["istar-tune: error: workers must be a positive integer, got '0'"])
    assert refused(capsys, path, "launcher=cloud") == (2, ["istar-tune: error: launcher 'cloud' unknown; choose one "
                                                           "of: inline, local, slurm"])
    assert refused(capsys, path, "grid_dir=/tmp/x") == (2, ["istar-tune: error: grid_dir= is istar-grid's; "
                                                            "istar-tune takes search_dir=DIR"])


def test_command_line_keys_set_the_search_or_add_run_overrides(tmp_path):
    spec = load(str(write_search(tmp_path)), ["trials=3", "seeds=[2,3]", "optim.lr=1e-4", "sampler=random"])
    assert (spec.trials, spec.seeds, spec.final_seeds, spec.sampler) == (3, (2, 3), (2, 3), "random")
    assert spec.fixed[-1] == "optim.lr=1e-4" and spec.baseline == ("criterion=cross_entropy",)
    assert read_search_roundtrip(tmp_path, spec) == spec.as_dict()


def read_search_roundtrip(tmp_path, spec):
    open_search(spec, tmp_path / "roundtrip")
    return read_search(tmp_path / "roundtrip").as_dict()


def test_the_packaged_searches_compose_at_every_corner():
    for name in ("lm_smollm2_lambda", "rte_minilm", "sst2_minilm", "sst2_minilm_demo", "sst2_minilm_grid"):
        check(load(name))
    assert parse({"fixed": FIXED, "space": SPACE}, "x").trials == 24


@pytest.mark.parametrize("text, reason", [("", "no mapping naming its search"), ("name: [", "not YAML"),
                                          ("fixed: {}", "no mapping naming its search")])
def test_a_damaged_search_record_is_one_line(tmp_path, text, reason):
    (tmp_path / "search.yaml").write_text(text)
    with pytest.raises(SearchError, match=rf"search.yaml is damaged \({reason}"):
        read_search(tmp_path)


def test_a_search_file_that_is_not_yaml_is_one_line_not_a_traceback(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text("fixed: {recipe: [sst2\n")
    code = cli.main([str(tmp_path / "s.yaml"), f"search_dir={tmp_path / 'search'}"])
    assert (code, capsys.readouterr().err.splitlines()) == (2, [
        f"istar-tune: error: search file {tmp_path}/s.yaml is not valid YAML: while parsing a flow sequence in "
        f"\"{tmp_path}/s.yaml\", line 1, column 17 did not find expected ',' or ']' in \"{tmp_path}/s.yaml\", line 2, "
        "column 1"])
    assert not (tmp_path / "search").exists()


def test_a_search_file_that_is_a_folder_is_named_as_a_folder_not_as_an_unknown_search(tmp_path, capsys):
    (tmp_path / "s.yaml").mkdir()
    code = cli.main([str(tmp_path / "s.yaml"), f"search_dir={tmp_path / 'search'}"])
    assert (code, capsys.readouterr().err.splitlines()) == (2, [
        f"istar-tune: error: cannot read search file {tmp_path}/s.yaml: it is a folder, not a file (name a file)"])
    assert not (tmp_path / "search").exists()
