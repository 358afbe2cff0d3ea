"""One override format and one merge: a grid file's and a search file's ``fixed`` mapping and the command line give
the same ``key=value`` arguments, and a later override of a key replaces an earlier one in its place."""
import yaml

from istar_plugin.config import compose, overrides
from istar_plugin.config.searches import parse
from istar_plugin.launch import grid

FIXED = {"recipe": "movie_snippets", "optim.lr": 1.0e-4, "criterion.layers": [3, 6], "data.validation_split": 0.25}
EXPECTED = ["recipe=movie_snippets", "optim.lr=3e-5", "criterion.layers=[3,6]", "data.validation_split=0.25"]


def test_grid_files_search_files_and_the_command_line_share_one_format_and_merge(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"fixed": FIXED, "sweep": {"seed": [1]}}, sort_keys=False))
    cell = grid.load(str(path), ["optim.lr=3e-5"]).cells[0]
    assert list(cell.arguments) == [*EXPECTED, "seed=1"]
    spec = parse({"fixed": FIXED, "space": {"criterion.zeta": {"choices": [0.2]}}}, "s", arguments=["optim.lr=3e-5"])
    assert list(spec.fixed) == EXPECTED
    assert overrides.arguments(overrides.merge(overrides.from_mapping(FIXED),
                                               overrides.pairs(["optim.lr=3e-5"]))) == EXPECTED
    assert compose([*EXPECTED, "optim.lr=1e-3"]).optim.lr == 1e-3  # composition: the later one wins too
