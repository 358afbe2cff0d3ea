"""Third-party criterions, installed as a real package with entry points, train from the command line."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import tiny_run_arguments

from istar_plugin.cli.run import main as run_main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hidden_l2_plugin"  # the README's package

HEAD_LAYER_MODULE = '''
"""A third-party criterion that changes the model: a d x d layer before the frozen head, trained alone."""
from dataclasses import dataclass

import torch

from istar_plugin.criterions import Criterion, CriterionOutput, task_loss
from istar_plugin.registry import CRITERIONS


@dataclass
class HeadLayerConfig:
    pass


@CRITERIONS.register("head_layer", HeadLayerConfig)
class HeadLayer(Criterion):
    def adapt(self, model):
        self.layer = torch.nn.Linear(model.hidden_size, model.hidden_size)
        model.insert_before_head("head_layer", self.layer)
        model.requires_grad_(False)
        self.layer.requires_grad_(True)

    def __call__(self, model, output, batch):
        loss = task_loss(self.kind, output, batch)
        norm = output.inserted["head_layer"].norm(dim=1).mean()
        return CriterionOutput(loss, {"task_loss": loss.detach(), "layer_norm": norm.detach()})
'''

SETUP_CFG = '''
[metadata]
name = istar-head-layer
version = 0.0.1

[options]
py_modules = istar_head_layer

[options.entry_points]
istar_plugin.criterions =
    head_layer = istar_head_layer
'''


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    """``pip install --no-deps`` of two plugin packages into their own directory (the environment is untouched):
    examples/hidden_l2_plugin (the README's, from a copy: building writes into the source folder) and head_layer."""
    sources = tmp_path_factory.mktemp("plugin_src")
    hidden_l2 = sources / "hidden_l2_plugin"
    shutil.copytree(EXAMPLE, hidden_l2)
    head_layer = sources / "head_layer_plugin"
    head_layer.mkdir()
    (head_layer / "istar_head_layer.py").write_text(HEAD_LAYER_MODULE)
    (head_layer / "setup.cfg").write_text(SETUP_CFG)
    (head_layer / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n'
                                               'build-backend = "setuptools.build_meta"\n')
    site = tmp_path_factory.mktemp("plugin_site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target", str(site),
         str(hidden_l2), str(head_layer)],
        check=True,
    )
    return site


def run_cli(site, *arguments):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "istar_plugin.cli", *arguments], env=env, capture_output=True,
                          text=True)


@pytest.mark.slow  # plugin_site: pip installs two packages; istar-run processes see them
def test_installed_plugin_is_listed_and_configurable(plugin_site):
    listed = run_cli(plugin_site, "--list", "criterions")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["cosreg", "cross_entropy", "flow", "head_layer", "hidden_l2", "isolayer", "istar",
                                     "spectrum"]
    shown = run_cli(plugin_site, "recipe=sst2", "criterion=hidden_l2", "criterion.weight=0.5", "--cfg")
    assert "name: hidden_l2" in shown.stdout and "weight: 0.5" in shown.stdout
    bad = run_cli(plugin_site, "recipe=sst2", "criterion=hidden_l2", "criterion.wieght=0.5")
    assert bad.returncode == 2 and "unknown key 'criterion.wieght'; allowed: name, weight" in bad.stderr


def test_not_installed_plugin_is_unknown(capsys):
    assert run_main(["recipe=sst2", "criterion=hidden_l2", "--cfg"]) == 2  # in this process: no plugin installed
    assert "unknown criterion 'hidden_l2'" in capsys.readouterr().err


@pytest.mark.slow
def test_trains_with_the_plugin_criterion(plugin_site, tiny_bert, shared_data, tmp_path):
    result = run_cli(plugin_site, *tiny_run_arguments(
        tiny_bert, shared_data, "criterion=hidden_l2", "data.max_train_samples=16", "max_steps=2", "tensorboard=false",
        f"output_dir={tmp_path / 'run'}",
    ))
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["criterion"] == {"name": "hidden_l2", "weight": 0.01} and results["step"] == 2
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("train/penalty", 0) > 0 for r in records)


@pytest.mark.slow
def test_a_plugin_criterion_inserts_a_layer_that_trains_alone_and_is_checkpointed(
        plugin_site, tiny_bert, shared_data, tmp_path):
    arguments = tiny_run_arguments(tiny_bert, shared_data, "criterion=head_layer", "optim.lr=1e-2", "save_every=1",
                                   "tensorboard=false", f"output_dir={tmp_path / 'run'}")
    result = run_cli(plugin_site, *arguments, "max_steps=2")
    assert result.returncode == 0, result.stderr[-2000:]
    checkpoints = tmp_path / "run" / "checkpoints"
    first, second = (torch.load(checkpoints / f"step_0000000{k}.pt", weights_only=False) for k in (1, 2))
    inserted = {"inserted.head_layer.weight", "inserted.head_layer.bias"}
    assert inserted <= set(second["model"])
    assert len(second["optimizer"]["state"]) == 2  # the optimizer holds the inserted layer's two tensors alone
    for name, tensor in second["model"].items():
        moved = not torch.equal(tensor, first["model"][name])
        assert moved == (name in inserted), name
    pretrained = load_file(tiny_bert / "model.safetensors")
    for name, tensor in pretrained.items():  # the encoder is bit-identical to the pretrained weights
        assert torch.equal(second["model"][f"model.bert.{name.removeprefix('bert.')}"], tensor), name
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["train/layer_norm"] > 0 for r in records if "train/loss" in r)
    (checkpoints / "step_00000002.pt").unlink()  # as if killed before step 2's checkpoint: resume from step 1
    resumed = run_cli(plugin_site, *arguments, "max_steps=2")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    again = torch.load(checkpoints / "step_00000002.pt", weights_only=False)
    for name in inserted:  # the inserted layer was restored from step 1 and retrained to the same step 2
        assert torch.equal(again["model"][name], second["model"][name]), name
