"""A search file's ``base``: another search's keys, ``fixed`` merged key by key, every other key replaced; an unknown
base or a chain back to itself is one line."""
import pytest

from istar_plugin.config.searches import SearchError, load


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
