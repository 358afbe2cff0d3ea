"""Alignment, uniformity (Wang & Isola 2020) and RankMe (Garrido et al. 2023) against independent numpy/scipy
references, and their invariants as hypothesis properties; the sentence-embedding measures istar-embed and the
sentence-transformers evaluator share, on embeddings whose answers are known."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.spatial.distance import pdist

from istar_plugin.isotropy import alignment, isoscore, rankme, uniformity
from istar_plugin.isotropy.embeddings import MEASURES, embedding_measures

finite = st.floats(-10, 10, allow_nan=False, allow_infinity=False)


def nonzero_rows(n_min=2, n_max=12, d_min=2, d_max=6):
    """Float64 matrices whose rows all have a direction (norm well above zero)."""
    shapes = st.tuples(st.integers(n_min, n_max), st.integers(d_min, d_max))
    return shapes.flatmap(lambda shape: arrays(np.float64, shape, elements=finite)).filter(
        lambda x: (np.linalg.norm(x, axis=1) > 1e-3).all())


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@settings(max_examples=60, deadline=None)
@given(nonzero_rows(), st.sampled_from([1.0, 2.0, 3.0]))
def test_alignment_matches_a_loop_over_pairs(x, alpha):
    y = x[::-1].copy()
    expected = np.mean([np.linalg.norm(a - b) ** alpha for a, b in zip(unit(x), unit(y))])
    value = alignment(torch.from_numpy(x), torch.from_numpy(y), alpha).item()
    assert value == pytest.approx(expected, rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(nonzero_rows(), st.floats(0.5, 4.0))
def test_uniformity_matches_scipy_pdist(x, t):
    expected = math.log(np.mean(np.exp(-t * pdist(unit(x), "sqeuclidean"))))
    assert uniformity(torch.from_numpy(x), t).item() == pytest.approx(expected, rel=1e-9, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(nonzero_rows(), st.floats(0.1, 50.0), st.integers(0, 2**31 - 1))
def test_alignment_and_uniformity_ignore_scale_and_rotation(x, scale, seed):
    rotation, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(x.shape[1], x.shape[1])))
    moved = torch.from_numpy(scale * x @ rotation)
    base = torch.from_numpy(x)
    assert uniformity(moved).item() == pytest.approx(uniformity(base).item(), abs=1e-9)
    assert alignment(moved, moved.flip(0)).item() == pytest.approx(alignment(base, base.flip(0)).item(), abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(nonzero_rows(n_max=20, d_max=8))
def test_rankme_matches_numpy_and_lies_between_one_and_the_rank_bound(x):
    singular = np.linalg.svd(x, compute_uv=False)
    p = singular / singular.sum() + 1e-7
    expected = math.exp(-(p * np.log(p)).sum())
    value = rankme(torch.from_numpy(x)).item()
    # through the Gram matrix's eigenvalues, a zero singular value comes out near 1e-8 of the largest, not 0
    assert value == pytest.approx(expected, rel=1e-6)
    assert 1 - 1e-5 <= value <= min(x.shape) + 1e-5


def test_known_values():
    assert alignment(torch.eye(3), torch.eye(3)).item() == 0.0
    assert alignment(torch.eye(2), -torch.eye(2)).item() == pytest.approx(4.0)
    # one direction for every point: uniformity 0 (its maximum); two antipodal points: -4 t
    assert uniformity(torch.ones(5, 3)).item() == pytest.approx(0.0, abs=1e-6)
    assert uniformity(torch.tensor([[0.0, 3.0], [0.0, -1.0]]), t=1.5).item() == pytest.approx(-6.0)
    assert rankme(torch.ones(10, 4)).item() == pytest.approx(1.0, abs=1e-5)  # rank one
    # unit circle points spread evenly are more uniform than points in one half-plane
    angles = torch.linspace(0, 2 * math.pi, 65)[:-1]
    spread = torch.stack([angles.cos(), angles.sin()], dim=1)
    assert uniformity(spread) < uniformity(spread[:32] * torch.tensor([1.0, 0.5]))


@pytest.mark.parametrize("call, message", [
    (lambda: alignment(torch.ones(3, 2), torch.ones(4, 2)), "alignment pairs rows"),
    (lambda: uniformity(torch.ones(1, 2)), "at least 2 points"),
    (lambda: rankme(torch.zeros(3, 2)), "all-zero"),
    (lambda: uniformity(torch.ones(3, 2), t=0), "t must be positive"),
])
def test_bad_inputs_name_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_embedding_measures_on_pairs_with_known_answers():
    generator = torch.Generator().manual_seed(0)
    first = torch.randn(40, 6, generator=generator, dtype=torch.float64)
    noise = torch.randn(40, 6, generator=generator, dtype=torch.float64)
    weights = torch.linspace(0, 1, 40).unsqueeze(1)  # the later pairs drift further apart: cosine falls with the index
    second = first + weights * 3 * noise
    cosine = torch.nn.functional.cosine_similarity(first, second)
    scores = (5 * cosine).tolist()  # gold scores ordered as the cosines: Spearman 100
    points = torch.cat([first, second])
    values = embedding_measures(points, scores, fit_cov=torch.eye(6), zeta=0.0)
    assert list(values) == list(MEASURES)
    assert values["spearman"] == pytest.approx(100.0)
    assert values["isoscore"] == pytest.approx(isoscore(points).item()) == pytest.approx(values["isoscore_star"])
    positive = torch.tensor(scores) >= 4
    assert values["alignment"] == pytest.approx(alignment(first[positive], second[positive]).item())
    assert values["uniformity"] == pytest.approx(uniformity(points).item())
    assert 0 < values["ev_1"] <= values["ev_10"] == pytest.approx(1.0)  # 6 dimensions: 10 components hold it all
    assert embedding_measures(points, [0.0] * 40, names=("alignment",)) == {  # no positive pair: undefined, not NaN
        "alignment": None, "alignment_undefined": "no pair has a gold score >= 4"}
    shrunk = embedding_measures(points, names=("isoscore_star",), fit_cov=torch.eye(6), zeta=1.0)
    assert shrunk == {"isoscore_star": pytest.approx(1.0)}  # all weight on the identity: perfectly isotropic


def test_embedding_measures_without_pairs_and_in_the_order_asked():
    points = torch.randn(30, 4, dtype=torch.float64)
    assert list(embedding_measures(points, names=("rankme", "isoscore"))) == ["rankme", "isoscore"]
    with pytest.raises(ValueError, match="spearman need gold scores"):
        embedding_measures(points, names=("spearman", "isoscore"))
    with pytest.raises(ValueError, match=r"unknown embedding measures \['cka'\]; choices: spearman, isoscore"):
        embedding_measures(points, names=("cka",))
