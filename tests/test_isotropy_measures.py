"""Example-based tests: the seed papers' measures, the covariance accumulator, degenerate inputs and errors."""
import io
import itertools
import re

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from istar_plugin.isotropy import (
    CovarianceAccumulator,
    average_cosine_similarity,
    explained_variance_ratio,
    isoscore_from_cov,
    isoscore_star,
    partition_isotropy,
    twonn_dimension,
)


class LargestTensor(TorchFunctionMode):
    """Records the largest number of elements of any tensor a torch call returns while active."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for out in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(out, torch.Tensor):
                self.numel = max(self.numel, out.numel())
        return result


def brute_force_cosine(points):
    """Mean over ordered pairs i != j of the cosine similarity; a zero row has cosine 0 with everything."""
    n = len(points)
    norms = np.linalg.norm(points, axis=1)
    total = 0.0
    for i, j in itertools.permutations(range(n), 2):
        if norms[i] > 0 and norms[j] > 0:
            total += points[i] @ points[j] / (norms[i] * norms[j])
    return total / (n * (n - 1))


def subspace_cloud(seed, n, k, ambient=20):
    """n Gaussian points on a random k-dimensional linear subspace of R^ambient (float64)."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.normal(size=(n, k)) @ rng.normal(size=(k, ambient)))


# --- average cosine similarity -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed, n, zero_rows", [(0, 2, 0), (1, 3, 1), (2, 9, 0), (3, 17, 4), (4, 30, 2)])
def test_average_cosine_similarity_matches_brute_force(seed, n, zero_rows):
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(n, 5)) + rng.normal(size=5)
    points[rng.choice(n, size=zero_rows, replace=False)] = 0.0
    result = average_cosine_similarity(torch.from_numpy(points)).item()
    assert result == pytest.approx(brute_force_cosine(points), abs=1e-12)


def test_average_cosine_similarity_known_values():
    same_direction = torch.tensor([[1.0, 2.0], [2.0, 4.0], [0.5, 1.0]])
    assert average_cosine_similarity(same_direction).item() == pytest.approx(1.0, abs=1e-6)
    antipodal = torch.tensor([[1.0, 0.0], [-3.0, 0.0]])
    assert average_cosine_similarity(antipodal).item() == pytest.approx(-1.0, abs=1e-6)
    all_zero = torch.zeros(4, 3)
    assert average_cosine_similarity(all_zero).item() == 0.0


def test_average_cosine_similarity_is_linear_in_n_for_many_points():
    rng = np.random.default_rng(5)
    block = rng.normal(size=(7, 4)) + 1.0
    copies = 40_000  # n = 280,000: an n x n matrix would need ~600 GB
    points = torch.from_numpy(np.tile(block, (copies, 1)))
    units = block / np.linalg.norm(block, axis=1, keepdims=True)
    n = len(points)
    expected = (copies**2 * (units @ units.T).sum() - n) / (n * (n - 1))  # every ordered pair minus self-pairs
    with LargestTensor() as largest:
        result = average_cosine_similarity(points).item()
    assert result == pytest.approx(expected, abs=1e-9)
    assert largest.numel <= points.numel()


# --- partition-function isotropy ---------------------------------------------------------------------------------


def brute_force_partition(points):
    """(I1, I2) with Z(c) = sum_i exp(c . x_i) over +-eigenvectors of X^T X, evaluated directly."""
    directions = np.linalg.eigh(points.T @ points)[1]
    directions = np.concatenate([directions, -directions], axis=1)
    z = np.exp(points @ directions).sum(axis=0)
    return z.min() / z.max(), z.std() / z.mean()


@pytest.mark.parametrize("seed, scale, offset", [(0, 0.3, 0.0), (1, 0.5, 1.0), (2, 1.0, -0.5)])
def test_partition_isotropy_matches_direct_evaluation(seed, scale, offset):
    rng = np.random.default_rng(seed)
    points = scale * rng.normal(size=(200, 6)) * np.linspace(0.5, 2, 6) + offset
    i1, i2 = partition_isotropy(torch.from_numpy(points))
    expected_i1, expected_i2 = brute_force_partition(points)
    assert i1.item() == pytest.approx(expected_i1, rel=1e-10)
    assert i2.item() == pytest.approx(expected_i2, rel=1e-10)


def test_partition_isotropy_separates_isotropic_from_anisotropic():
    torch.manual_seed(0)
    isotropic = 0.1 * torch.randn(20_000, 8, dtype=torch.float64)
    i1, i2 = partition_isotropy(isotropic)
    assert i1 > 0.95 and i2 < 0.02
    drifted = isotropic + 0.5  # a common direction shared by every point, as in contextual embeddings
    i1, i2 = partition_isotropy(drifted)
    assert i1 < 0.2 and i2 > 0.3


def test_partition_isotropy_does_not_depend_on_eigenvector_signs(monkeypatch):
    rng = np.random.default_rng(3)
    points = torch.from_numpy(rng.normal(size=(500, 5)) * [1.0, 0.5, 2.0, 0.1, 1.0] + 0.3)
    expected = partition_isotropy(points)
    original_eigh = torch.linalg.eigh
    signs = torch.tensor([1.0, -1.0, -1.0, 1.0, -1.0], dtype=torch.float64)

    def sign_flipped_eigh(matrix):
        values, vectors = original_eigh(matrix)
        return torch.return_types.linalg_eigh((values, vectors * signs))

    monkeypatch.setattr(torch.linalg, "eigh", sign_flipped_eigh)
    flipped = partition_isotropy(points)
    monkeypatch.undo()
    for got, want in zip(flipped, expected):
        assert got.item() == pytest.approx(want.item(), rel=1e-12)
    for got, want in zip(partition_isotropy(-points), expected):
        assert got.item() == pytest.approx(want.item(), rel=1e-12)


def test_partition_isotropy_does_not_overflow_for_large_norms():
    rng = np.random.default_rng(4)
    points = torch.from_numpy(1000.0 * rng.normal(size=(300, 4)))  # exp(c . x) overflows float64 without log space
    i1, i2 = partition_isotropy(points)
    assert torch.isfinite(i1) and torch.isfinite(i2)
    assert 0.0 <= i1.item() < 1e-10 and i2.item() > 1.0  # one direction dominates every other by far


# --- explained variance ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed, n, d", [(0, 500, 4), (1, 40, 12), (2, 8, 30)])
def test_explained_variance_ratio_matches_numpy_eigenvalues(seed, n, d):
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(n, d)) * np.exp(rng.normal(size=d)) + 5.0
    eigenvalues = np.clip(np.sort(np.linalg.eigvalsh(np.cov(points.T)))[::-1], 0, None)
    for k in range(1, d + 1):
        expected = eigenvalues[:k].sum() / eigenvalues.sum()
        assert explained_variance_ratio(torch.from_numpy(points), k).item() == pytest.approx(expected, abs=1e-12)


def test_explained_variance_ratio_of_a_known_gaussian():
    torch.manual_seed(1)
    points = torch.randn(50_000, 3, dtype=torch.float64) * torch.tensor([3.0, 1.0, 1.0], dtype=torch.float64)
    assert explained_variance_ratio(points, 1).item() == pytest.approx(9 / 11, abs=0.01)
    assert explained_variance_ratio(points, 3).item() == pytest.approx(1.0, abs=1e-12)


# --- TwoNN ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 5])
def test_twonn_recovers_the_dimension_of_a_linear_subspace(k):
    estimate = twonn_dimension(subspace_cloud(k, 2000, k)).item()
    assert estimate == pytest.approx(k, rel=0.15)


def test_twonn_does_not_depend_on_chunk_size_and_never_builds_n_by_n():
    points = subspace_cloud(7, 800, 3)
    n = len(points)
    expected = twonn_dimension(points, chunk_size=n).item()
    for chunk_size in (3, 64, 500, 10 * n):
        assert twonn_dimension(points, chunk_size=chunk_size).item() == pytest.approx(expected, rel=1e-12)
    with LargestTensor() as largest:
        twonn_dimension(points, chunk_size=50)
    assert largest.numel <= 50 * n


def test_twonn_ignores_duplicate_points():
    points = subspace_cloud(8, 1000, 2)
    with_duplicates = torch.cat([points, points[:5]])
    estimate = twonn_dimension(with_duplicates).item()
    assert np.isfinite(estimate) and estimate == pytest.approx(2, rel=0.15)


def test_twonn_without_discarding_is_finite():
    # BUG: with discard_fraction = 0 the largest mu gets F = m / m = 1 and -log(1 - F) = inf.
    estimate = twonn_dimension(subspace_cloud(9, 1000, 2), discard_fraction=0.0).item()
    assert np.isfinite(estimate) and estimate == pytest.approx(2, rel=0.15)


# --- covariance accumulator --------------------------------------------------------------------------------------


def test_accumulator_mask_skips_rows_and_empty_updates_change_nothing():
    rng = np.random.default_rng(0)
    points = torch.from_numpy(rng.normal(size=(50, 4)) + 2.0)
    mask = torch.from_numpy(rng.uniform(size=50) < 0.6)
    accumulator = CovarianceAccumulator(4)
    accumulator.update(points, mask)
    accumulator.update(points[:0])
    accumulator.update(points, torch.zeros(50, dtype=torch.bool))
    assert accumulator.count == int(mask.sum())
    np.testing.assert_allclose(accumulator.covariance().numpy(), np.cov(points[mask].numpy().T), rtol=1e-12)


def test_accumulator_float32_keeps_its_dtype():
    rng = np.random.default_rng(1)
    points = rng.normal(size=(1000, 6)) * 3 + 1
    accumulator = CovarianceAccumulator(6, dtype=torch.float32)
    for chunk in np.array_split(points, 7):
        accumulator.update(torch.from_numpy(chunk))
    assert accumulator.covariance().dtype == torch.float32
    np.testing.assert_allclose(accumulator.covariance().numpy(), np.cov(points.T), rtol=1e-5, atol=1e-5)


def test_accumulator_state_survives_torch_save():
    rng = np.random.default_rng(2)
    points = torch.from_numpy(rng.normal(size=(60, 3)))
    accumulator = CovarianceAccumulator(3)
    accumulator.update(points[:25])
    buffer = io.BytesIO()
    torch.save(accumulator.state_dict(), buffer)
    buffer.seek(0)
    restored = CovarianceAccumulator(3)
    restored.load_state_dict(torch.load(buffer))
    restored.update(points[25:])
    np.testing.assert_allclose(restored.covariance().numpy(), np.cov(points.numpy().T), rtol=1e-12)


def test_loaded_accumulators_do_not_share_tensors_with_the_state():
    # BUG: load_state_dict keeps the state's own tensors (.to is a no-op for equal dtype), so updating
    # one accumulator silently rewrites the checkpoint and every other accumulator loaded from it.
    rng = np.random.default_rng(3)
    source = CovarianceAccumulator(3)
    source.update(torch.from_numpy(rng.normal(size=(10, 3))))
    state = source.state_dict()
    first, second = CovarianceAccumulator(3), CovarianceAccumulator(3)
    first.load_state_dict(state)
    second.load_state_dict(state)
    first.update(torch.from_numpy(rng.normal(size=(10, 3)) * 5 + 3))
    assert torch.equal(second.covariance(), source.covariance())
    assert torch.equal(state["mean"], source.mean)


def test_accumulator_errors_name_the_bad_value():
    accumulator = CovarianceAccumulator(4)
    with pytest.raises(ValueError, match="dimension 3, accumulator has 4"):
        accumulator.update(torch.randn(5, 3))
    with pytest.raises(ValueError, match="dimensions 4 and 5"):
        accumulator.merge(CovarianceAccumulator(5))
    accumulator.update(torch.randn(1, 4))
    with pytest.raises(ValueError, match="has 1"):
        accumulator.covariance()
    with pytest.raises(ValueError, match="dimension 6, accumulator has 4"):
        accumulator.load_state_dict(CovarianceAccumulator(6).state_dict())


# --- IsoScore*: degenerate inputs and errors ---------------------------------------------------------------------


@pytest.mark.parametrize("zeta", [-0.1, 1.5, float("nan")])
def test_zeta_outside_unit_interval_is_rejected(zeta):
    with pytest.raises(ValueError, match=re.escape(f"got {zeta}")):
        isoscore_star(torch.randn(10, 3), torch.eye(3), zeta)


@pytest.mark.parametrize("zeta", [0.0, 0.5])
def test_fewer_than_two_points_is_rejected_unless_zeta_is_one(zeta):
    with pytest.raises(ValueError, match="got 1$"):
        isoscore_star(torch.randn(1, 3), torch.eye(3), zeta)
    with pytest.raises(ValueError, match="got 0$"):
        isoscore_star(torch.randn(4, 3), torch.eye(3), zeta, mask=torch.zeros(4, dtype=torch.bool))
    assert isoscore_star(torch.randn(1, 3), torch.eye(3), 1.0).item() == pytest.approx(1.0, abs=1e-6)


def test_shape_and_dimension_errors_name_the_bad_value():
    with pytest.raises(ValueError, match=re.escape("shape (3, 3), expected (4, 4)")):
        isoscore_star(torch.randn(10, 4), torch.eye(3), 0.5)
    with pytest.raises(ValueError, match="d = 1"):
        isoscore_star(torch.randn(10, 1))
    with pytest.raises(ValueError, match="d = 1"):
        isoscore_from_cov(torch.ones(1, 1))
    with pytest.raises(ValueError, match=re.escape("shape (2, 3)")):
        isoscore_from_cov(torch.ones(2, 3))
    with pytest.raises(ValueError, match=re.escape("shape (5,)")):
        isoscore_star(torch.randn(5))
    with pytest.raises(ValueError, match="zeta = 0.25"):
        isoscore_star(torch.randn(10, 4), zeta=0.25)
    with pytest.raises(ValueError, match=re.escape("torch.int64 (10,)")):
        isoscore_star(torch.randn(10, 4), mask=torch.ones(10, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape("torch.bool (9,)")):
        isoscore_star(torch.randn(10, 4), mask=torch.ones(9, dtype=torch.bool))


def test_sequence_of_chunks_errors_and_is_never_concatenated():
    with pytest.raises(ValueError, match=re.escape("dimensions [3, 4]")):
        isoscore_star([torch.randn(5, 4), torch.randn(5, 3)])
    with pytest.raises(ValueError, match="empty sequence"):
        isoscore_star([])
    with pytest.raises(ValueError, match="mask"):
        isoscore_star([torch.randn(5, 4)], mask=torch.ones(5, dtype=torch.bool))
    layers = [torch.randn(300, 16, requires_grad=True) for _ in range(4)]
    with LargestTensor() as largest:
        isoscore_star(layers, torch.eye(16), 0.2).backward()
    assert largest.numel == 300 * 16  # one layer's worth: no (1200, 16) concatenation, forward or backward
    assert all(torch.isfinite(layer.grad).all() and layer.grad.abs().sum() > 0 for layer in layers)


def test_other_measures_reject_bad_arguments():
    with pytest.raises(ValueError, match="got 0"):
        explained_variance_ratio(torch.randn(10, 3), 0)
    with pytest.raises(ValueError, match="got 4"):
        explained_variance_ratio(torch.randn(10, 3), 4)
    with pytest.raises(ValueError, match="at least 2 points, got 1"):
        explained_variance_ratio(torch.randn(1, 3), 1)
    with pytest.raises(ValueError, match="all points are identical"):
        explained_variance_ratio(torch.ones(10, 3), 1)  # 0 / 0, not a silent NaN
    with pytest.raises(ValueError, match="got 2"):
        twonn_dimension(torch.randn(2, 3))
    with pytest.raises(ValueError, match="got 1.0"):
        twonn_dimension(torch.randn(20, 3), discard_fraction=1.0)
    with pytest.raises(ValueError, match="got 1"):
        average_cosine_similarity(torch.randn(1, 3))


@pytest.mark.parametrize("n", [3, 40])  # Gram form (n < d) and covariance form
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zero_point_cloud_scores_zero_with_finite_gradient(n, dtype):
    zeros = torch.zeros(n, 8, dtype=dtype, requires_grad=True)
    score = isoscore_star(zeros)
    assert score.item() == 0.0
    (grad,) = torch.autograd.grad(score, zeros)
    assert torch.count_nonzero(grad) == 0
    repeated = (torch.randn(1, 8, dtype=dtype) * 100).expand(n, 8).clone().requires_grad_(True)
    score = isoscore_star(repeated)  # every row equal: rounding in the mean leaves at most one direction
    assert abs(score.item()) <= 1e-6
    (grad,) = torch.autograd.grad(score, repeated)
    assert torch.isfinite(grad).all()


def test_zero_point_cloud_with_shrinkage_scores_the_shrinkage_matrix():
    shrink = torch.diag(torch.tensor([4.0, 2.0, 1.0, 1.0], dtype=torch.float64))
    zeros = torch.zeros(6, 4, dtype=torch.float64, requires_grad=True)
    score = isoscore_star(zeros, shrink, 0.3)
    assert score.item() == pytest.approx(isoscore_from_cov(shrink).item(), abs=1e-12)
    (grad,) = torch.autograd.grad(score, zeros)
    assert torch.isfinite(grad).all()


def test_streamed_forms_match_the_point_forms():
    from istar_plugin.isotropy import CovarianceAccumulator, cosine_from_unit_sums, explained_variance_curve

    generator = torch.Generator().manual_seed(3)
    points = (torch.randn(500, 12, generator=generator, dtype=torch.float64) * torch.linspace(0.2, 3.0, 12).double()
              + 1.5)
    accumulator = CovarianceAccumulator(12)
    unit_sum, unit_squares = torch.zeros(12, dtype=torch.float64), 0.0
    for chunk in points.split(64):
        accumulator.update(chunk)
        units = torch.nn.functional.normalize(chunk, dim=1)
        unit_sum, unit_squares = unit_sum + units.sum(dim=0), unit_squares + units.square().sum().item()
    curve = explained_variance_curve(accumulator.covariance(), 12)
    expected = [explained_variance_ratio(points, k).item() for k in range(1, 13)]
    assert curve.tolist() == pytest.approx(expected, abs=1e-12) and curve[-1].item() == pytest.approx(1.0)
    assert bool((curve[1:] >= curve[:-1]).all())
    diagonal = torch.diag(torch.tensor([1., 6., 3.]))
    assert explained_variance_curve(diagonal, 3).tolist() == [0.6, 0.9, 1.0]
    streamed = cosine_from_unit_sums(unit_sum, unit_squares, 500).item()
    assert streamed == pytest.approx(average_cosine_similarity(points).item(), abs=1e-12)
