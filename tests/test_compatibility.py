"""What users and queued jobs rely on survives the package's layout: console scripts and their arguments,
entry-point groups and registered names, config keys (additions since then listed in ``ADDED``), recipe/grid/profile
names, public imports, ``python -m istar_plugin.cli`` and a ``CellRunner`` pickled by submitit before the layout
changed.

``golden/names_before_layout.json`` and ``golden/cellrunner_before_layout.pkl`` were written by the code as it
was before the layout (commit e736a87): the names, the resolved config keys of every criterion on the default
recipe, and a submitit ``DelayedSubmission`` of ``istar_plugin.cell.CellRunner``.
"""
import importlib
import json
import pickle
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from istar_plugin.config import ADDED_KEYS, available, compose
from istar_plugin.registry import REGISTRIES

GOLDEN = Path(__file__).resolve().parent / "golden"
BEFORE = json.loads((GOLDEN / "names_before_layout.json").read_text())
ROOT = Path(__file__).resolve().parents[1]
# What came after the layout, each name on purpose: a name that is neither here nor in BEFORE fails the tests,
# and so does a name of BEFORE that went missing (renamed or removed).
ADDED = {"engines": ["istar", "sentence_transformers"], "tasks": ["lm"], "recipes": ["stsb_st", "lm"],
         "model_presets": ["smollm2"],
         "config_keys": sorted(ADDED_KEYS)}  # config keys: listed with their old-behaviour value in the product
SCRIPTS = ("istar-run", "istar-grid", "istar-report", "istar-export", "istar-analyze")


@pytest.mark.parametrize("script", SCRIPTS)
def test_console_scripts_answer_help_with_their_arguments_and_no_doctest_lines(script):
    result = subprocess.run([str(Path(sys.executable).with_name(script)), "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {script}") and ">>>" not in result.stdout
    expected = {"istar-run": ["--cfg", "--list", "--multirun", "--dry-run"], "istar-grid": ["--dry-run"],
                "istar-report": ["--out"], "istar-export": ["--step", "--out"],
                "istar-analyze": ["--split", "--out", "--batch-size"]}[script]
    assert all(option in result.stdout for option in expected)


def test_python_m_cli_is_istar_run():
    result = subprocess.run([sys.executable, "-m", "istar_plugin.cli", "--list", "criterions"], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.split() == BEFORE["criterions"]


def test_entry_point_groups_and_registered_names_are_unchanged():
    groups = {kind: {entry.name for entry in metadata.entry_points(group=f"istar_plugin.{kind}")}
              for kind in REGISTRIES}
    assert all("builtin" in names for names in groups.values())  # the built-ins register through the same groups
    now = {kind: registry.names() for kind, registry in REGISTRIES.items()}
    assert {kind: sorted(set(now.get(kind, [])) - set(ADDED.get(kind, []))) for kind in now} == {
        kind: BEFORE.get(kind, []) for kind in now}


def test_recipes_model_presets_grids_and_profiles_keep_their_names():
    assert sorted(set(available()) - set(ADDED["recipes"])) == BEFORE["recipes"]
    assert sorted(set(available("model")) - set(ADDED["model_presets"])) == BEFORE["model_presets"]
    grids = {path.stem for path in (ROOT / "recipes" / "grids").glob("*.yaml")}
    assert {"calibration", "figure7", "figure8", "isolayer", "paper", "replication_minilm", "smoke", "table1"} <= grids
    assert {path.stem for path in (ROOT / "slurm" / "profiles").glob("*.yaml")} >= {"gpu_a100", "local"}


@pytest.mark.parametrize("criterion", BEFORE["config_keys"])
def test_config_keys_are_unchanged(criterion):
    extra = ["init_from=/nonexistent"] if criterion == "isolayer" else []
    cfg = OmegaConf.to_container(compose(["recipe=movie_snippets", f"criterion={criterion}", *extra]))

    def keys(node, prefix=""):
        return [key for name, value in node.items()
                for key in (keys(value, f"{prefix}{name}.") if isinstance(value, dict) else [f"{prefix}{name}"])]

    assert sorted(set(keys(cfg)) - set(ADDED["config_keys"])) == BEFORE["config_keys"][criterion]


@pytest.mark.parametrize("module, name", [
    ("istar_plugin.isotropy", "isoscore_star"), ("istar_plugin.criterions", "IStarCriterion"),
    ("istar_plugin.registry", "CRITERIONS"), ("istar_plugin.metrics", "compute"), ("istar_plugin.hf", "IStarTrainer"),
    ("istar_plugin.hooks", "Hook"), ("istar_plugin.models", "HFEncoder"), ("istar_plugin.cell", "CellRunner"),
])
def test_public_imports_still_work(module, name):
    assert getattr(importlib.import_module(module), name) is not None  # an import or attribute error fails first


def test_a_cellrunner_pickled_before_the_layout_still_loads():
    from istar_plugin.launch.cell import CellRunner

    delayed = pickle.loads((GOLDEN / "cellrunner_before_layout.pkl").read_bytes())  # submitit's DelayedSubmission
    assert type(delayed.function) is CellRunner and delayed.args == ("/nonexistent/run",)
