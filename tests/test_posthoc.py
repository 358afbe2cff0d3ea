"""Post-hoc transforms: whitening against a numpy transcription of Su et al. (2021), all-but-the-top against
Mu & Viswanath's (2018) definition, and their invariants as hypothesis properties."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from istar_plugin.posthoc import AllButTheTop, Center, Chain, Whiten, parse_transform, parse_transforms


def cloud(seed, n=300, d=6, shift=2.0):
    rng = np.random.default_rng(seed)
    scales = np.geomspace(5.0, 0.2, d)  # distinct variances: well-defined principal axes
    return torch.from_numpy(rng.normal(size=(n, d)) * scales @ np.linalg.qr(rng.normal(size=(d, d)))[0] + shift)


def bert_whitening(fit, points, k):
    """Su et al. (2021): mu = mean, U, s = svd(cov), W = U sqrt(1/s); (x - mu) W[:, :k]."""
    mu = fit.mean(axis=0)
    u, s, _ = np.linalg.svd(np.cov((fit - mu).T, bias=True))
    return (points - mu) @ (u @ np.diag(1 / np.sqrt(s)))[:, :k]


def all_but_the_top(fit, points, d):
    """Mu & Viswanath (2018): subtract the mean, then the projections on the top D PCA directions."""
    mu = fit.mean(axis=0)
    top = np.linalg.svd(fit - mu, full_matrices=False)[2][:d]
    centred = points - mu
    return centred - centred @ top.T @ top


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6))
def test_whitening_matches_bert_whitening_up_to_axis_signs(seed, k):
    fit, other = cloud(seed), cloud(seed + 1, n=40)
    ours = Whiten(k).fit(fit)(other).numpy()
    reference = bert_whitening(fit.numpy(), other.numpy(), k)
    # eigenvector signs are the solver's choice: compare what they leave unchanged, the points' dot products
    np.testing.assert_allclose(ours @ ours.T, reference @ reference.T, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(np.abs(ours), np.abs(reference), rtol=1e-6, atol=1e-8)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6))
def test_whitened_fit_set_has_identity_covariance(seed, k):
    fit = cloud(seed)
    out = Whiten(k).fit(fit)(fit)
    assert out.shape == (fit.shape[0], k)
    np.testing.assert_allclose(np.cov(out.numpy().T, bias=True).reshape(k, k), np.eye(k), atol=1e-8)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 5))
def test_all_but_the_top_matches_its_definition_and_removes_the_top_variance(seed, d):
    fit, other = cloud(seed), cloud(seed + 1, n=40)
    ours = AllButTheTop(d).fit(fit)
    np.testing.assert_allclose(ours(other).numpy(), all_but_the_top(fit.numpy(), other.numpy(), d), atol=1e-9)
    # on the fit set, what remains has no variance along the removed directions: its top variance is the (d+1)-th
    remaining = np.linalg.eigvalsh(np.cov(ours(fit).numpy().T, bias=True))[::-1]
    original = np.linalg.eigvalsh(np.cov(fit.numpy().T, bias=True))[::-1]
    np.testing.assert_allclose(remaining[: fit.shape[1] - d], original[d:], rtol=1e-7)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_centring_zeroes_the_fit_mean_and_chains_compose_in_order(seed):
    fit, other = cloud(seed), cloud(seed + 1, n=40)
    assert Center().fit(fit)(fit).mean(dim=0).abs().max() < 1e-10
    chain = parse_transform("center+abtt:2").fit(fit)
    assert isinstance(chain, Chain)
    np.testing.assert_allclose(chain(other).numpy(), AllButTheTop(2).fit(fit)(other).numpy(), atol=1e-9)
    assert set(chain.state_dict()) == {"0.mean", "1.mean", "1.directions"}


def test_whitening_refuses_more_directions_than_the_fit_set_spans():
    points = cloud(0, n=4, d=6)  # 4 points span 3 directions around their mean
    with pytest.raises(ValueError, match=r"whiten:5: the fit set \(4 points\) spans only 3 directions"):
        Whiten(5).fit(points)
    with pytest.raises(ValueError, match="keeps more dimensions than the embeddings have"):
        Whiten(7).fit(points)
    with pytest.raises(RuntimeError, match="call fit"):
        Whiten(2)(points)


@pytest.mark.parametrize("spec, message", [
    ("whiten", "unknown transform 'whiten'; choices: none, center"),
    ("pca:3", "unknown transform 'pca:3'"),
    ("abtt:x", "'x' is not a positive whole number"),
    ("center,center", "named twice"),
    (" , ", "no transform named"),
])
def test_bad_specs_are_one_line_naming_the_choices(spec, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_transforms(spec)
    assert "\n" not in str(error.value)


def test_transforms_keep_the_input_dtype_and_width_bookkeeping():
    points = cloud(3).float()
    for spec, width in [("none", 6), ("center", 6), ("whiten:4", 4), ("abtt:1", 6), ("center+whiten:3", 3)]:
        transform = parse_transform(spec).fit(points)
        out = transform(points)
        assert out.dtype == torch.float32 and out.shape[1] == width == transform.out_dim(6)


def test_a_transform_is_named_by_its_spec():
    names = [transform.name for transform in parse_transforms("none,center,whiten:4,center+abtt:1")]
    assert names == ["none", "center", "whiten:4", "center+abtt:1"]
