"""CovarianceAccumulator.all_reduce across real gloo processes on CPU: the union's covariance, bitwise equal on
every rank."""
import datetime

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from distributed_workers import rendezvous

from istar_plugin.isotropy import CovarianceAccumulator

WORLD_SIZE = 3
DIM = 7
SCENARIOS = {  # rows held by each rank; "empty_rank" gives rank 1 no points at all
    "uneven_shards": (40, 3, 157),
    "empty_rank": (25, 0, 31),
    "one_rank_holds_all": (0, 0, 50),
}


def scenario_points(name):
    """The union of every rank's shard: anisotropic, far from the origin (exercises the re-centring)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    return rng.normal(size=(sum(SCENARIOS[name]), DIM)) * np.exp(rng.normal(size=DIM)) + 100.0


def worker(rank, port, out_dir):
    timeout = datetime.timedelta(seconds=60)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)  # the parent's (``rendezvous``)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD_SIZE, timeout=timeout)
    try:
        for name, sizes in SCENARIOS.items():
            start = sum(sizes[:rank])
            shard = torch.from_numpy(scenario_points(name)[start : start + sizes[rank]])
            accumulator = CovarianceAccumulator(DIM)
            for chunk in torch.split(shard, 16):
                accumulator.update(chunk)
            accumulator.all_reduce()
            torch.save(accumulator.state_dict(), f"{out_dir}/{name}_{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def reduced_states(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("all_reduce")
    with rendezvous() as port:
        mp.spawn(worker, args=(port, str(out_dir)), nprocs=WORLD_SIZE, join=True)
    return {
        name: [torch.load(out_dir / f"{name}_{rank}.pt") for rank in range(WORLD_SIZE)] for name in SCENARIOS
    }


@pytest.mark.parametrize("name", SCENARIOS)
def test_all_reduce_gives_every_rank_the_union_covariance_bitwise(reduced_states, name):
    states = reduced_states[name]
    points = scenario_points(name)
    for state in states[1:]:
        assert state["count"] == states[0]["count"]
        assert torch.equal(state["mean"], states[0]["mean"])
        assert torch.equal(state["scatter"], states[0]["scatter"])
    accumulator = CovarianceAccumulator(DIM)
    accumulator.load_state_dict(states[0])
    assert accumulator.count == len(points)
    np.testing.assert_allclose(accumulator.mean.numpy(), points.mean(axis=0), rtol=1e-12)
    expected = np.cov(points.T)
    np.testing.assert_allclose(accumulator.covariance().numpy(), expected, rtol=1e-10,
                               atol=1e-10 * np.abs(expected).max())


@pytest.mark.parametrize("zeta", [0.0, 0.3])
def test_pooled_isoscore_star_refuses_a_shrinkage_matrix_as_isoscore_star_does(monkeypatch, zeta):
    """One check of zeta and shrinkage_cov for both: a mis-shaped matrix is refused alike, at any zeta, before any
    collective runs (the process group here is a stand-in reporting two ranks)."""
    from istar_plugin.isotropy import isoscore_star, pooled_isoscore_star

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    points, wrong = torch.randn(8, 4), torch.eye(3)
    with pytest.raises(ValueError) as alone:
        isoscore_star(points, wrong, zeta)
    with pytest.raises(ValueError) as pooled:
        pooled_isoscore_star(points, wrong, zeta)
    assert str(pooled.value) == str(alone.value) == ("shrinkage_cov has shape (3, 3), expected (4, 4) to match points "
                                                     "of dimension 4")
