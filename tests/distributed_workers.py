"""Worker processes for tests/test_distributed.py: started by torch.multiprocessing (spawn) or torchrun.

    python -m torch.distributed.run --nproc_per_node 2 tests/distributed_workers.py OVERRIDES...

runs a tiny training where rank 1 fails at step 1 while rank 0 stalls outside any collective, so only
torchrun's agent can end rank 0.
"""
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator

import torch
from torch.distributed import TCPStore

from istar_plugin.config import compose
from istar_plugin.criterions import IStarConfig, IStarCriterion
from istar_plugin.criterions.shrinkage import estimate_shrinkage_covariance
from istar_plugin.hooks import Hook
from istar_plugin.isotropy import pooled_isoscore_star
from istar_plugin.training.distributed import init_from_env, leave_process_group
from istar_plugin.training.trainer import Trainer

WORLD_SIZE = 2
DIM = 6
ZETA = 0.3
SIZES = ((20, 17), (9, 44))  # rank r holds two chunks ("layers") of these sizes: different sizes per rank


@contextlib.contextmanager
def rendezvous() -> Iterator[int]:
    """``with rendezvous() as port:`` start the ranks (``join(rank, port)``) inside the block: the port of a TCPStore
    this process hosts, as torchrun's agent hosts its workers' store. The OS chooses the port and it stays bound until
    the block ends: no other process (another test, another pytest-xdist worker) can take it before the ranks meet, as
    it could a port found free, released, and bound by rank 0 seconds later."""
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield store.port


def join(rank: int, port: int, timeout_s: int = 60):
    """Set torchrun's environment variables (one thread, as torchrun sets; every rank a client of the store at
    ``port``, see :func:`rendezvous`) and join the gloo group through the plugin's own ``init_from_env``."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True",
                      RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE),
                      ISTAR_DIST_TIMEOUT_S=str(timeout_s))
    return init_from_env("cpu")


def cloud_points() -> list[list[torch.Tensor]]:
    """Every rank's chunks (float64, anisotropic, off-centre), from one seed."""
    generator = torch.Generator().manual_seed(5)
    scale = torch.linspace(0.2, 3.0, DIM, dtype=torch.float64)
    return [[torch.randn(n, DIM, generator=generator, dtype=torch.float64) * scale + 4.0 for n in sizes]
            for sizes in SIZES]


def shrinkage_matrix() -> torch.Tensor:
    generator = torch.Generator().manual_seed(6)
    a = torch.randn(3 * DIM, DIM, generator=generator, dtype=torch.float64)
    return torch.cov(a.T)


class _Stub:
    """The two things IStarCriterion asks of a model and its output: a token cloud and logits."""

    def __init__(self, chunks):
        self.chunks = chunks
        self.logits = torch.zeros(2, 2)

    def token_cloud(self, output, layers):
        return self.chunks


def collective_checks(rank: int, port: int, overrides: list, out_dir: str) -> None:
    """Pooled IsoScore* value and gradient, istar's local/pooled switch, and Sigma_S from a real Trainer."""
    join(rank, port)
    chunks = [chunk.clone().requires_grad_() for chunk in cloud_points()[rank]]
    pooled = pooled_isoscore_star(chunks, shrinkage_matrix(), ZETA)
    pooled.backward()
    criterion_scores = {}
    for mode in ("pooled", "local"):
        criterion = IStarCriterion(IStarConfig(lam=-1.0, zeta=ZETA, distributed_cloud=mode), "classification")
        criterion.shrinkage_cov = shrinkage_matrix().float()
        stub = _Stub([chunk.detach() for chunk in chunks])
        stats = criterion(stub, stub, {"labels": torch.tensor([0, 1])}).stats
        criterion_scores[mode] = stats["isoscore_star"].item()

    trainer = Trainer(compose(overrides))
    sigma = {points: estimate_shrinkage_covariance(trainer.run_view, None, points, epoch=0).state_dict()
             for points in (10**6, 301)}
    torch.save({"pooled": pooled.detach(), "grads": [chunk.grad for chunk in chunks], "criterion": criterion_scores,
                "sigma": sigma}, f"{out_dir}/rank{rank}.pt")
    trainer.close()
    del trainer  # garbage, as at a run's exit, for leave_process_group
    torch.distributed.barrier()  # an orderly end: no rank tears down gloo while another still works
    leave_process_group()


def thread_names() -> list[str]:
    """The names of this process's threads (Linux: /proc/self/task/*/comm)."""
    return sorted(open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task"))


def leave_after_fit(rank: int, port: int, overrides: list, out_dir: str) -> None:
    """One rank of a finished run leaving the group as it does at exit: its threads' names before and after."""
    join(rank, port)
    Trainer(compose(overrides)).fit()  # the trainer, garbage now, as when istar-run returns
    finished = thread_names()
    leave_process_group()
    with open(f"{out_dir}/rank{rank}.json", "w") as file:
        json.dump({"finished": finished, "left": thread_names()}, file)


def cell_worker(rank: int, port: int, run_dir: str, out_dir: str) -> None:
    """One rank of a two-task grid cell: what ``CellRunner`` returned on it, as JSON."""
    from istar_plugin.launch.cell import CellRunner

    join(rank, port, timeout_s=30)
    returned = CellRunner()(run_dir)
    with open(f"{out_dir}/rank{rank}.json", "w") as file:
        json.dump({key: value for key, value in returned.items() if key in ("skipped", "step")}, file)
    leave_process_group()


class FailAtStep1(Hook):
    """Rank 1 raises after optimizer step 1; with ``stall``, rank 0 then sleeps outside any collective."""

    def __init__(self, stall: bool):
        self.stall = stall

    def on_step_end(self, trainer, step, stats):
        if step != 1:
            return
        if trainer.rank == 1:
            raise RuntimeError("simulated failure on rank 1 at step 1")
        if self.stall:
            time.sleep(600)


def failing_fit(rank: int, port: int, overrides: list, out_dir: str) -> None:
    """Train with rank 1 failing at step 1; append how this rank ended, as one JSON line, to ``ended.jsonl``
    (the lines' order is the order the ranks ended in)."""
    join(rank, port, timeout_s=15)
    try:
        Trainer(compose(overrides), hooks=[FailAtStep1(stall=False)]).fit()
        outcome = "finished"
    except Exception as error:  # noqa: BLE001 - the outcome is what the test inspects
        outcome = f"{type(error).__name__}: {error}"
        raise
    finally:
        with open(f"{out_dir}/ended.jsonl", "a") as handle:
            handle.write(json.dumps({"rank": rank, "outcome": outcome}) + "\n")


if __name__ == "__main__":
    Trainer(compose(sys.argv[1:]), hooks=[FailAtStep1(stall=True)]).fit()
