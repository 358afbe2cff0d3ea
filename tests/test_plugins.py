"""A third-party criterion, installed as a real package with an entry point, trains from the command line."""
import json
import os
import subprocess
import sys

import pytest

PLUGIN_MODULE = '''
"""A third-party criterion: the task loss plus an L2 penalty on the last layer's token states."""
from dataclasses import dataclass

from istar_plugin.criterions import CriterionOutput, task_loss
from istar_plugin.registry import CRITERIONS


@dataclass
class HiddenL2Config:
    weight: float = 0.01


@CRITERIONS.register("hidden_l2", HiddenL2Config)
class HiddenL2:
    def __init__(self, cfg, kind):
        self.cfg, self.kind = cfg, kind

    def hooks(self):
        return []

    def __call__(self, model, output, batch):
        base = task_loss(self.kind, output, batch)
        penalty = self.cfg.weight * model.last_layer_tokens(output).square().mean()
        return CriterionOutput(base + penalty, {"task_loss": base.detach(), "penalty": penalty.detach()})
'''

SETUP_CFG = '''
[metadata]
name = istar-hidden-l2
version = 0.0.1

[options]
py_modules = istar_hidden_l2

[options.entry_points]
istar_plugin.criterions =
    hidden_l2 = istar_hidden_l2
'''


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    """``pip install --no-deps`` of the plugin package into its own directory (the environment is untouched)."""
    source = tmp_path_factory.mktemp("plugin_src")
    (source / "istar_hidden_l2.py").write_text(PLUGIN_MODULE)
    (source / "setup.cfg").write_text(SETUP_CFG)
    (source / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
    site = tmp_path_factory.mktemp("plugin_site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target", str(site), str(source)],
        check=True,
    )
    return site


def run_cli(site, *arguments):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "istar_plugin.cli", *arguments], env=env, capture_output=True, text=True)


def test_installed_plugin_is_listed_and_configurable(plugin_site):
    listed = run_cli(plugin_site, "--list", "criterions")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["cosreg", "cross_entropy", "hidden_l2", "istar"]
    shown = run_cli(plugin_site, "recipe=sst2", "criterion=hidden_l2", "criterion.weight=0.5", "--cfg")
    assert "name: hidden_l2" in shown.stdout and "weight: 0.5" in shown.stdout
    bad = run_cli(plugin_site, "recipe=sst2", "criterion=hidden_l2", "criterion.wieght=0.5")
    assert bad.returncode == 2 and "unknown key 'criterion.wieght'; allowed: name, weight" in bad.stderr


def test_not_installed_plugin_is_unknown(tmp_path):
    result = run_cli(tmp_path, "recipe=sst2", "criterion=hidden_l2", "--cfg")
    assert result.returncode == 2 and "unknown criterion 'hidden_l2'" in result.stderr


def test_trains_with_the_plugin_criterion(plugin_site, tiny_bert, shared_data, tmp_path):
    result = run_cli(
        plugin_site, "recipe=sst2", "criterion=hidden_l2", "model=minilm", f"model.name_or_path={tiny_bert}",
        "data.source=files", f"data.dir={shared_data / 'sst2'}", "data.max_train_samples=16", "data.max_eval_samples=8",
        "batch_size=8", "max_steps=2", "progress=false", "tensorboard=false", f"output_dir={tmp_path / 'run'}",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["criterion"] == {"name": "hidden_l2", "weight": 0.01} and results["step"] == 2
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("train/penalty", 0) > 0 for r in records)
