"""A run whose settings make it pointless says so at the start: a constant penalty, a one-class training set."""
import pytest

from istar_plugin.config import compose
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments


def setup_lines(tiny_bert, shared_data, tmp_path, capsys, *extra):
    cfg = compose(tiny_run_arguments(tiny_bert, shared_data, "data.max_train_samples=16",
                                     f"output_dir={tmp_path / 'run'}", *extra))
    Trainer(cfg).close()
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]


@pytest.mark.parametrize("extra, expected", [
    (["criterion=istar", "criterion.zeta=1"], "warning: criterion.zeta=1: Sigma_zeta is Sigma_S alone, "
                                             "so IsoScore* does not depend on the batch and the penalty "
                                             "is a constant with no gradient"),
    (["criterion=istar", "criterion.lam=0"],
     "warning: criterion.lam=0: the penalty is 0, so the run trains on the task loss alone"),
    (["criterion=cosreg", "criterion.lam=0"], "warning: criterion.lam=0: the penalty is 0"),
])
def test_a_constant_penalty_is_named(tiny_bert, shared_data, tmp_path, capsys, extra, expected):
    lines = setup_lines(tiny_bert, shared_data, tmp_path, capsys, *extra)
    assert len(lines) == 1 and lines[0].startswith(expected)


def test_a_one_class_training_set_is_named_and_a_useful_run_says_nothing(tiny_bert, shared_data, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    rows = [line for line in (shared_data / "sst2" / "train.tsv").read_text().splitlines()[1:]
            if line.endswith("\t1")][:16]
    (data / "train.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    (data / "dev.tsv").write_text((shared_data / "sst2" / "dev.tsv").read_text())
    lines = setup_lines(tiny_bert, shared_data, tmp_path, capsys, f"data.dir={data}")
    assert lines == ["warning: the training set holds one class only (label 1): "
                     "the classifier can only learn to predict it"]
    assert setup_lines(tiny_bert, shared_data, tmp_path / "other", capsys, "criterion=istar", "criterion.lam=-1") == []
