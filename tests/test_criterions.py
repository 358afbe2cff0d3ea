"""The criterions' losses and logged statistics against the isotropy functions they wrap."""
from types import SimpleNamespace

import pytest
import torch

from istar_plugin.criterions import (
    CosRegConfig,
    CosRegCriterion,
    CrossEntropyConfig,
    CrossEntropyCriterion,
    IStarConfig,
    IStarCriterion,
    task_loss,
)
from istar_plugin.isotropy import average_cosine_similarity, isoscore_star


class CloudModel:
    """Stands in for the adapter: hands the criterion a fixed token cloud, one tensor per layer."""

    def __init__(self, chunks, padding_rows=None):
        self.chunks, self.padding_rows = chunks, padding_rows

    def token_cloud(self, output, layers, include_padding=False):
        if include_padding:
            return [torch.cat([chunk, self.padding_rows]) for chunk in self.chunks]
        return self.chunks

    def last_layer_tokens(self, output):
        return self.chunks[-1]


def _inputs(seed=0):
    generator = torch.Generator().manual_seed(seed)
    chunks = [torch.randn(40, 6, generator=generator) * torch.arange(1.0, 7.0) for _ in range(3)]
    output = SimpleNamespace(logits=torch.randn(4, 3, generator=generator))
    return CloudModel(chunks), output, {"labels": torch.tensor([0, 2, 1, 2])}


@pytest.mark.parametrize("lam", [-5.0, -1.0, 0.0, 3.0])
def test_istar_adds_lambda_times_one_minus_the_score_and_logs_the_score_for_every_lambda(lam):
    model, output, batch = _inputs()
    sigma = torch.diag(torch.arange(1.0, 7.0))
    criterion = IStarCriterion(IStarConfig(lam=lam, zeta=0.4), "classification")
    criterion.shrinkage_cov = sigma
    result = criterion(model, output, batch)
    expected_score = isoscore_star(torch.cat(model.chunks), sigma, 0.4)
    task = torch.nn.functional.cross_entropy(output.logits, batch["labels"])
    assert result.stats["isoscore_star"].item() == pytest.approx(expected_score.item(), abs=1e-6)
    assert result.stats["task_loss"].item() == pytest.approx(task.item(), abs=1e-6)
    assert result.loss.item() == pytest.approx(task.item() + lam * (1 - expected_score.item()), abs=1e-5)
    assert result.stats["penalty"].item() == pytest.approx(lam * (1 - expected_score.item()), abs=1e-5)


def test_istar_refuses_to_shrink_towards_a_sigma_s_that_was_never_computed():
    model, output, batch = _inputs()
    with pytest.raises(RuntimeError, match="Sigma_S has not been computed"):
        IStarCriterion(IStarConfig(zeta=0.2), "classification")(model, output, batch)


def test_istar_gradient_pushes_the_score_in_the_direction_lambda_asks():
    model, output, batch = _inputs(seed=1)
    scores = {}
    for lam in (-1.0, 1.0):
        chunks = [chunk.clone().requires_grad_() for chunk in model.chunks]
        criterion = IStarCriterion(IStarConfig(lam=lam, zeta=0.0), "classification")
        criterion(CloudModel(chunks), output, batch).loss.backward()
        with torch.no_grad():
            stepped = [chunk - 0.05 * chunk.grad for chunk in chunks]
        scores[lam] = isoscore_star(torch.cat(stepped)).item()
    before = isoscore_star(torch.cat(model.chunks)).item()
    assert scores[-1.0] < before < scores[1.0]


def test_istar_padding_include_scores_the_padded_positions_too():
    model, output, batch = _inputs()
    model.padding_rows = torch.full((60, 6), 4.0)  # identical padding vectors, as a padded batch has
    scores = {}
    for padding in ("exclude", "include"):
        criterion = IStarCriterion(IStarConfig(lam=-1.0, zeta=0.0, padding=padding), "classification")
        scores[padding] = criterion(model, output, batch).stats["isoscore_star"].item()
    padded = [torch.cat([chunk, model.padding_rows]) for chunk in model.chunks]
    assert scores["exclude"] == pytest.approx(isoscore_star(model.chunks).item(), abs=1e-6)
    assert scores["include"] == pytest.approx(isoscore_star(padded).item(), abs=1e-6)
    assert abs(scores["include"] - scores["exclude"]) > 0.01
    with pytest.raises(ValueError, match="criterion.padding 'all' unknown; choose one of: exclude, include"):
        IStarConfig(padding="all")


def test_cosreg_adds_lambda_times_the_mean_pairwise_cosine_of_the_last_layer():
    model, output, batch = _inputs()
    result = CosRegCriterion(CosRegConfig(lam=2.0), "classification")(model, output, batch)
    cosine = average_cosine_similarity(model.chunks[-1]).item()
    assert result.stats["cosine"].item() == pytest.approx(cosine, abs=1e-6)
    assert result.stats["penalty"].item() == pytest.approx(2.0 * cosine, abs=1e-6)


def test_task_losses_per_kind_and_an_unknown_kind_names_the_choices():
    regression = SimpleNamespace(logits=torch.tensor([[1.0], [3.0]]))
    assert task_loss("regression", regression, {"labels": torch.tensor([2.0, 2.0])}).item() == pytest.approx(1.0)
    qa = SimpleNamespace(start_logits=torch.zeros(1, 4), end_logits=torch.zeros(1, 4))
    # Uniform logits over 4 positions; a position beyond the window is clamped into it.
    qa_loss = task_loss("extractive_qa", qa, {"start_positions": torch.tensor([9]), "end_positions": torch.tensor([1])})
    assert qa_loss.item() == pytest.approx(torch.log(torch.tensor(4.0)).item())
    criterion = CrossEntropyCriterion(CrossEntropyConfig(), "ranking")
    with pytest.raises(ValueError, match="unknown task kind 'ranking'; choose one of: classification, regression"):
        criterion(*_inputs())
