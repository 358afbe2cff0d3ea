"""Isotropy calibration (Ding et al.): CosReg on the word embeddings, spectrum control and the flow."""
import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from istar_plugin.config import ConfigError, compose
from istar_plugin.criterions import (
    CosRegConfig,
    CosRegCriterion,
    FlowConfig,
    FlowCriterion,
    Glow,
    SpectrumConfig,
    SpectrumCriterion,
    cosreg_loss,
    embedding_cosine,
    spectrum_penalty,
    spectrum_targets,
)
from istar_plugin.criterions.modules import standard_normal_nll


class EmbeddingModel:
    """Stands in for the adapter: a word-embedding matrix."""

    def __init__(self, matrix):
        self.matrix = matrix

    def word_embeddings(self):
        return self.matrix


def _classification(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return SimpleNamespace(logits=torch.randn(4, 2, generator=generator)), {"labels": torch.tensor([0, 1, 1, 0])}


# ----------------------------------------------------------------------------- CosReg on the embeddings
def test_cosreg_loss_adds_lam_times_the_mean_cosine():
    total, cosine = cosreg_loss(torch.tensor(0.5), torch.ones(4, 3), lam=2.0)  # identical directions: cosine 1
    assert (round(total.item(), 4), round(cosine.item(), 4)) == (2.5, 1.0)


def test_embedding_cosine_is_the_pairwise_mean_over_v_squared():
    matrix = torch.randn(50, 7, dtype=torch.float64)
    units = torch.nn.functional.normalize(matrix, dim=1)
    cosines = units @ units.T
    expected = (cosines.sum() - cosines.diagonal().sum()) / 50**2
    assert embedding_cosine(matrix).item() == pytest.approx(expected.item(), abs=1e-6)  # computed in float32


def test_embedding_cosine_gradient_is_exact_and_zero_rows_have_no_direction():
    from istar_plugin.criterions.modules import EmbeddingCosine as _EmbeddingCosine

    matrix = torch.randn(40, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_EmbeddingCosine.apply, (matrix,))
    with_zero = torch.randn(30, 4, dtype=torch.float64)
    with_zero[3] = 0
    leaf = with_zero.clone().requires_grad_()
    _EmbeddingCosine.apply(leaf).backward()
    assert leaf.grad[3].abs().max() == 0 and leaf.grad.isfinite().all()
    units = torch.nn.functional.normalize(with_zero, dim=1)  # the zero row stays zero: cosine 0 with the rest
    expected = ((units @ units.T).sum() - units.square().sum()) / 30**2
    assert _EmbeddingCosine.apply(with_zero).item() == pytest.approx(expected.item(), rel=1e-12)


def test_cosreg_embeddings_penalises_the_matrix_and_its_gradient_reaches_it():
    matrix = (torch.randn(30, 5) + 2.0).requires_grad_()  # a common direction: mean cosine well above 0
    output, batch = _classification()
    result = CosRegCriterion(CosRegConfig(lam=2.0, target="embeddings"), "classification")(
        EmbeddingModel(matrix), output, batch)
    cosine = embedding_cosine(matrix.detach())
    assert result.stats["cosine"].item() == pytest.approx(cosine.item(), rel=1e-6) and cosine > 0.3
    assert result.stats["penalty"].item() == pytest.approx(2.0 * cosine.item(), rel=1e-5)
    result.loss.backward()
    assert matrix.grad is not None and matrix.grad.abs().sum() > 0


# ----------------------------------------------------------------------------- spectrum control
def test_spectrum_targets_decay():
    polynomial = spectrum_targets("polynomial", 4, c1=3.0, c2=0.0, gamma=-1.0)
    assert polynomial.tolist() == pytest.approx([3.0, 1.5, 1.0, 0.75])
    exponential = spectrum_targets("exponential", 3, c1=2.0, c2=0.5, gamma=1.0)
    assert exponential.tolist() == pytest.approx([2 * math.exp(-0.5), 2 * math.exp(-1.0), 2 * math.exp(-1.5)])


@settings(max_examples=25)
@given(st.integers(0, 2**31 - 1), st.integers(2, 6), st.integers(3, 10))
def test_spectrum_penalty_matches_svd_and_its_gradient(seed, d, rows_per_column):
    """Tall matrices, like a vocabulary's embeddings; the float32 Gram matrix costs precision in sigma_min
    (absolute error about eps * sigma_max^2 / sigma_k), hence the 1e-4 tolerance."""
    generator = torch.Generator().manual_seed(seed)
    matrix = torch.randn(rows_per_column * d, d, generator=generator, dtype=torch.float64) * torch.linspace(
        0.5, 3.0, d, dtype=torch.float64)
    targets = torch.rand(d, generator=generator, dtype=torch.float64)
    ours = matrix.clone().requires_grad_()
    penalty, sigma = spectrum_penalty(ours, targets)
    reference = matrix.clone().requires_grad_()
    expected = (torch.linalg.svdvals(reference) - targets).square().sum()
    torch.testing.assert_close(sigma, torch.linalg.svdvals(matrix), rtol=1e-4, atol=1e-4)
    assert penalty.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-4)
    penalty.backward(), expected.backward()
    torch.testing.assert_close(ours.grad, reference.grad, rtol=1e-3, atol=1e-4)  # penalty is float32


def test_spectrum_criterion_pulls_singular_values_towards_the_targets():
    torch.manual_seed(0)
    matrix = (torch.randn(200, 8) * 3).requires_grad_()
    cfg = SpectrumConfig(decay="polynomial", lam=1.0, c1=1.0, gamma=-0.5)
    criterion = SpectrumCriterion(cfg, "classification")
    output, batch = _classification()
    optimizer = torch.optim.SGD([matrix], lr=0.1)
    first = None
    for _ in range(50):
        result = criterion(EmbeddingModel(matrix), output, batch)
        first = first if first is not None else result.stats["penalty"].item()
        optimizer.zero_grad(), result.loss.backward(), optimizer.step()
    assert result.stats["penalty"].item() < 0.01 * first
    assert result.stats["sigma_max"].item() == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("arguments, message", [
    (["criterion.decay=cubic"], "criterion.decay 'cubic' unknown; choose one of: polynomial, exponential"),
    (["criterion.gamma=0.5"], "criterion.gamma=0.5 does not decay: polynomial c1 \\* k\\^gamma needs gamma < 0"),
    (["criterion.decay=exponential", "criterion.gamma=-1"], "do not decay: exponential .* needs gamma > 0 and c2 > 0"),
    (["criterion.decay=exponential", "criterion.c2=0"], "do not decay: exponential .* needs gamma > 0 and c2 > 0"),
    (["criterion.c1=0"], "criterion.c1 must be a positive number"),
])
def test_spectrum_bad_settings_fail_at_config_time(arguments, message):
    with pytest.raises(ConfigError, match=message):
        compose(["recipe=sst2", "criterion=spectrum", *arguments])


def test_gamma_defaults_follow_the_decay():
    assert compose(["recipe=sst2", "criterion=spectrum"]).criterion.gamma is None
    assert SpectrumConfig(decay="polynomial").gamma == -0.5 and SpectrumConfig(decay="exponential").gamma == 0.5


def test_models_without_word_embeddings_are_refused_at_config_time():
    class Headless:
        pass

    for criterion, cfg in (("cosreg", CosRegConfig(target="embeddings")), ("spectrum", SpectrumConfig())):
        cls = CosRegCriterion if criterion == "cosreg" else SpectrumCriterion
        with pytest.raises(ValueError, match="needs a model adapter with a word-embedding matrix .*Headless has none"):
            cls.check_setup(cfg, Headless, "classification")
    CosRegCriterion.check_setup(CosRegConfig(target="hidden"), Headless, "classification")  # no matrix needed
    with pytest.raises(ValueError, match="criterion=flow needs a model adapter that can insert a module"):
        FlowCriterion.check_setup(FlowConfig(), Headless, "classification")
    with pytest.raises(ConfigError, match="criterion.target 'rows' unknown; choose one of: hidden, embeddings"):
        compose(["recipe=sst2", "criterion=cosreg", "criterion.target=rows"])


# ----------------------------------------------------------------------------- the flow
def _random_flow(seed: int, dim: int, depth: int = 3, width: int = 8) -> Glow:
    """A flow with every parameter random (not the identity it starts as)."""
    torch.manual_seed(seed)
    flow = Glow(dim, depth=depth, width=width).double()
    with torch.no_grad():
        for parameter in flow.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.3)
    return flow


@settings(max_examples=30)
@given(st.integers(0, 2**31 - 1), st.integers(2, 9), st.integers(1, 3))
def test_flow_inverse_undoes_forward(seed, dim, depth):
    flow = _random_flow(seed, dim, depth)
    x = torch.randn(16, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    z, _ = flow.encode(x)
    torch.testing.assert_close(flow.decode(z), x, rtol=0, atol=1e-5)
    torch.testing.assert_close(flow.encode(flow.decode(x))[0], x, rtol=0, atol=1e-5)


@settings(max_examples=30)
@given(st.integers(0, 2**31 - 1), st.integers(2, 6))
def test_flow_logdet_equals_the_autograd_jacobian(seed, dim):
    flow = _random_flow(seed, dim)
    x = torch.randn(3, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    _, logdet = flow.encode(x)
    for row in range(3):
        jacobian = torch.autograd.functional.jacobian(lambda v: flow.encode(v.unsqueeze(0))[0].squeeze(0), x[row])
        assert logdet[row].item() == pytest.approx(torch.linalg.slogdet(jacobian).logabsdet.item(), abs=1e-8)


@settings(max_examples=20)
@given(st.integers(0, 2**31 - 1), st.integers(2, 9))
def test_identity_initialised_flow_gives_the_standard_normal_nll(seed, dim):
    flow = Glow(dim, depth=2, width=4).double()
    x = torch.randn(5, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    expected = 0.5 * (x.square().sum(dim=1) + dim * math.log(2 * math.pi))
    torch.testing.assert_close(flow.nll(x), expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(standard_normal_nll(x), expected, rtol=0, atol=1e-12)


class FlowModel:
    """Stands in for the adapter: records the module inserted before the head."""

    hidden_size = 6

    def __init__(self):
        self.inserted = {}

    def insert_before_head(self, name, module):
        self.inserted[name] = module


def test_flow_criterion_inserts_the_flow_and_its_nll_does_not_reach_the_encoder():
    model = FlowModel()
    criterion = FlowCriterion(FlowConfig(beta=0.5, depth=2, width=8), "classification")
    criterion.adapt(model)
    assert model.inserted == {"flow": criterion.flow}
    representation = torch.randn(4, 6, requires_grad=True)
    logits = torch.zeros(4, 2, requires_grad=True)  # the head's output, independent of h here
    output = SimpleNamespace(logits=logits, representation=representation)
    result = criterion(model, output, {"labels": torch.tensor([0, 1, 1, 0])})
    nll = criterion.flow.nll(representation.detach()).mean() / 6
    assert result.stats["nll"].item() == pytest.approx(nll.item(), rel=1e-6)
    assert result.loss.item() == pytest.approx(result.stats["task_loss"].item() + 0.5 * nll.item(), rel=1e-6)
    result.loss.backward()
    assert representation.grad is None  # the NLL trains the flow alone
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in criterion.flow.parameters())
