"""Distributed training with real processes on gloo (CPU): CovarianceAccumulator.all_reduce gives every rank the
union's covariance bitwise; Sigma_S and the penalty pooled over ranks equal one process's on the concatenated cloud;
padding-free, each rank packs its own micro-batch into its row and Sigma_S is bitwise the same on both ranks; a
torchrun run matches one process at the same global batch (padded and padding-free); and a failing rank ends the
job instead of hanging it."""
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import distributed_workers as workers
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from istar_plugin.config import compose
from istar_plugin.criterions.shrinkage import estimate_shrinkage_covariance
from istar_plugin.isotropy import CovarianceAccumulator, isoscore_star, pooled_isoscore_star
from istar_plugin.launch.cell import RUNNING_ELSEWHERE, write_snapshot
from istar_plugin.storage.lock import RunDirLock
from istar_plugin.training.distributed import leave_process_group
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments
from tolerances import ROUNDING_FACTOR, assert_same_computation, fp32_rounding, relative_rounding

WORKERS = Path(workers.__file__)
FAILING_RUN = ("criterion.shrinkage_points=300", "data.max_train_samples=16", "data.max_eval_samples=8",
               "eval_before_training=false")


def tiny_overrides(tiny_bert, shared_data, output_dir, *extra):
    return tiny_run_arguments(
        tiny_bert, shared_data, "model.dropout=0", "data.max_train_samples=48", "data.max_eval_samples=48",
        "optim.grad_accum=2", "optim.epochs=2", "optim.lr=1e-3", "criterion=istar",
        "criterion.shrinkage_points=1000000", "log_every=1",
        "precision=fp32",  # the tolerances below are fp32 rounding's (auto is bf16 on a CPU with AVX512-BF16 or AMX)
        f"output_dir={output_dir}", *extra,
    )


def start_torchrun(*arguments):
    """``torchrun --standalone --nproc_per_node 2`` in its own session (so a hung job can be killed whole);
    standalone: the agent hosts its stores on ports the OS chooses and keeps bound, none another process can take."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *arguments]
    env = {**os.environ, "ISTAR_DIST_TIMEOUT_S": "60", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish(process, timeout):
    """(exit code, stdout, stderr); past ``timeout`` seconds the process group is killed and the test fails."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"torchrun still running after {timeout} s: {process.args}")
    return process.returncode, stdout, stderr


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread in this process too, like the workers: several processes share two cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------ CovarianceAccumulator.all_reduce
ACCUMULATOR_RANKS = 3
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


def all_reduce_worker(rank, port, out_dir):
    timeout = datetime.timedelta(seconds=60)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)  # the parent's (``rendezvous``)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=ACCUMULATOR_RANKS, timeout=timeout)
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
    with workers.rendezvous() as port:
        mp.spawn(all_reduce_worker, args=(port, str(out_dir)), nprocs=ACCUMULATOR_RANKS, join=True)
    return {
        name: [torch.load(out_dir / f"{name}_{rank}.pt") for rank in range(ACCUMULATOR_RANKS)] for name in SCENARIOS
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
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    points, wrong = torch.randn(8, 4), torch.eye(3)
    with pytest.raises(ValueError) as alone:
        isoscore_star(points, wrong, zeta)
    with pytest.raises(ValueError) as pooled:
        pooled_isoscore_star(points, wrong, zeta)
    assert str(pooled.value) == str(alone.value) == ("shrinkage_cov has shape (3, 3), expected (4, 4) to match points "
                                                     "of dimension 4")


# ------------------------------------------------------------ Sigma_S and the pooled penalty
@pytest.fixture(scope="module", params=["false", "true"], ids=["padded", "padding_free"])
def sigma_overrides(request, tiny_bert, shared_data, tmp_path_factory):
    # eval_batch_size=1: no padding, so each sentence's hidden states are bitwise the same in any process
    # and only the pooling is under test (batches of 8 padded differently per rank differ by ~1e-9);
    # in both modes: padded batches and each sentence as its own packed row
    return tiny_overrides(tiny_bert, shared_data, tmp_path_factory.mktemp("sigma"), "data.max_train_samples=24",
                          "eval_batch_size=1", f"model.padding_free={request.param}")


@pytest.fixture(scope="module")
def runs(sigma_overrides, tmp_path_factory):
    """Both ranks' results (spawned processes) and the single-process Sigma_S, computed meanwhile."""
    out_dir = tmp_path_factory.mktemp("ranks")
    with workers.rendezvous() as port:
        context = mp.spawn(workers.collective_checks, args=(port, sigma_overrides, str(out_dir)),
                           nprocs=workers.WORLD_SIZE, join=False)
        # rank 0 holds theirs
        trainer = Trainer(compose([*sigma_overrides, f"output_dir={tmp_path_factory.mktemp('single')}"]))
        single = {points: estimate_shrinkage_covariance(trainer.run_view, None, points, epoch=0)
                  for points in (10**6, 301)}
        single["tokens"] = sum(len(feature["input_ids"]) for feature in trainer.train_features)
        while not context.join():
            pass
    return [torch.load(out_dir / f"rank{rank}.pt") for rank in range(workers.WORLD_SIZE)], single


@pytest.fixture(scope="module")
def rank_results(runs):
    return runs[0]


@pytest.fixture(scope="module")
def single_sigma(runs):
    return runs[1]


def test_sigma_s_is_bitwise_identical_on_both_ranks_and_equals_the_single_process_one(rank_results, single_sigma):
    first, second = (result["sigma"][10**6] for result in rank_results)
    assert torch.equal(first["mean"], second["mean"]) and torch.equal(first["scatter"], second["scatter"])
    single = single_sigma[10**6]  # the quota exceeds every token: all three runs use every training token
    assert first["count"] == single.count == 2 * single_sigma["tokens"]  # both layers' vectors of every token
    covariance = first["scatter"] / (first["count"] - 1)
    torch.testing.assert_close(covariance, single.covariance(), rtol=0, atol=1e-10)
    assert covariance.abs().max() > 0.5


def test_sigma_s_points_count_is_the_quota_whatever_the_world_size(rank_results, single_sigma):
    assert [result["sigma"][301]["count"] for result in rank_results] == [301, 301]  # quotas 151 + 150, pooled
    assert single_sigma[301].count == 301


def test_pooled_penalty_and_gradient_equal_the_single_process_ones_on_the_concatenated_cloud(rank_results):
    clouds = workers.cloud_points()
    union = [chunk.clone().requires_grad_() for chunks in clouds for chunk in chunks]
    expected = isoscore_star(union, workers.shrinkage_matrix(), workers.ZETA)
    expected.backward()
    for rank, result in enumerate(rank_results):
        torch.testing.assert_close(result["pooled"], expected.detach(), rtol=0, atol=1e-10)
        # Every rank computes the same pooled loss; the all-reduce's adjoint sums the ranks' upstream
        # gradients, so rank r holds world_size times its rows' share, which DDP's averaging divides out.
        own = union[2 * rank : 2 * rank + 2]
        for got, chunk in zip(result["grads"], own):
            torch.testing.assert_close(got / workers.WORLD_SIZE, chunk.grad, rtol=1e-10, atol=1e-16)
        assert torch.equal(result["pooled"], rank_results[0]["pooled"])


def test_istar_criterion_pools_the_cloud_or_scores_each_rank_alone(rank_results):
    clouds, shrinkage = workers.cloud_points(), workers.shrinkage_matrix()
    pooled = isoscore_star([chunk for chunks in clouds for chunk in chunks], shrinkage, workers.ZETA).item()
    in_fp32 = [[chunk.float() for chunk in chunks] for chunks in clouds]
    pooled_fp32 = isoscore_star([chunk for chunks in in_fp32 for chunk in chunks], shrinkage.float(), workers.ZETA)
    for rank, result in enumerate(rank_results):  # the criterion scores in float32: against this process's fp32
        # score of the same cloud, both within their rounding of the float64 ones (tests/tolerances.py)
        assert_same_computation([torch.tensor(result["criterion"]["pooled"]), pooled_fp32],
                                [result["pooled"], torch.tensor(pooled, dtype=torch.float64)], what="pooled")
        local = isoscore_star(clouds[rank], shrinkage, workers.ZETA)
        assert_same_computation([torch.tensor(result["criterion"]["local"]),
                                 isoscore_star(in_fp32[rank], shrinkage.float(), workers.ZETA)], [local, local],
                                what="local")
    assert abs(rank_results[0]["criterion"]["local"] - rank_results[1]["criterion"]["local"]) > 0.05


# ------------------------------------------------------------ padding-free: each rank packs its own micro-batch
def watch_training_forwards(trainer):
    """The trainer's training forward passes as they happen (the Sigma_S and evaluation passes run in eval mode):
    each micro-batch's real token ids per sequence, the packed row's cumulative lengths and token count, and the
    Sigma_S the criterion then holds."""
    seen = []

    def record(module, args, output):
        if module.training:
            batch = args[0]
            lengths = batch["attention_mask"].sum(dim=1).tolist()
            seen.append({"sequences": [ids[:length].tolist() for ids, length in zip(batch["input_ids"], lengths)],
                         "cu_seq_lens": output.packing.cu_seq_lens.tolist(),
                         "tokens": [len(states) for states in output.hidden_states],
                         "sigma": trainer.criterion.shrinkage_cov.clone()})

    trainer.model.register_forward_hook(record)
    return seen


def record_training(rank: int, port: int, overrides: list, out_dir: str) -> None:
    """One rank's training run, its forward passes saved as ``rank{rank}.pt``."""
    workers.join(rank, port)
    trainer = Trainer(compose(overrides))
    seen = watch_training_forwards(trainer)
    trainer.fit()
    torch.save(seen, f"{out_dir}/rank{rank}.pt")
    del trainer  # garbage, as at a run's exit, for leave_process_group
    torch.distributed.barrier()  # an orderly end: no rank tears down gloo while another still works
    leave_process_group()


def forwards_overrides(tiny_bert, shared_data, output_dir):
    """16 examples, global batches of 8 in 2 micro-batches per step, 2 epochs (Sigma_S from every training token
    before each, in batches of 8), padding-free."""
    return tiny_overrides(tiny_bert, shared_data, output_dir, "model.padding_free=true", "data.max_train_samples=16",
                          "data.max_eval_samples=8", "eval_before_training=false")


@pytest.fixture(scope="module")
def forwards(tiny_bert, shared_data, tmp_path_factory):
    """Both ranks' training forward passes (spawned processes) and the single process's, run meanwhile
    (:func:`forwards_overrides`)."""
    def overrides(output_dir):
        return forwards_overrides(tiny_bert, shared_data, output_dir)

    out_dir = tmp_path_factory.mktemp("ranks")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # several processes share two cores
    try:
        with workers.rendezvous() as port:
            context = mp.spawn(record_training, args=(port, overrides(out_dir / "run"), str(out_dir)),
                               nprocs=workers.WORLD_SIZE, join=False)
            trainer = Trainer(compose(overrides(tmp_path_factory.mktemp("single"))))
            single = watch_training_forwards(trainer)
            trainer.fit()
            while not context.join():
                pass
    finally:
        torch.set_num_threads(threads)
    return [torch.load(out_dir / f"rank{rank}.pt") for rank in range(workers.WORLD_SIZE)], single


@pytest.fixture(scope="module")
def float64_forwards(tiny_bert, shared_data, tmp_path_factory):
    """The single process's training forward passes again with its model in float64: its fp32 run's twin."""
    trainer = Trainer(compose(forwards_overrides(tiny_bert, shared_data, tmp_path_factory.mktemp("float64"))))
    trainer.model.double()
    seen = watch_training_forwards(trainer)
    trainer.fit()
    return seen


def test_each_rank_packs_its_own_micro_batch_and_the_ranks_together_the_single_process_s(forwards):
    ranks, single = forwards
    assert [len(seen) for seen in ranks] == [len(single)] * 2 == [4, 4]  # 2 steps of 2 micro-batches
    for micro_batch, whole in enumerate(single):
        assert len(whole["sequences"]) == 8
        for rank, seen in enumerate(ranks):
            own = seen[micro_batch]
            # rank r's micro-batch: every world_size-th example of the global one, from the r-th
            assert own["sequences"] == whole["sequences"][rank :: workers.WORLD_SIZE]
            lengths = [len(sequence) for sequence in own["sequences"]]
            # its packed row: these 4 sequences end to end, nothing of the other rank's
            assert own["cu_seq_lens"] == [sum(lengths[:end]) for end in range(len(lengths) + 1)]
            assert own["tokens"] == [sum(lengths)] * 3  # embeddings and both layers: (tokens, hidden)
        assert sum(seen[micro_batch]["tokens"][0] for seen in ranks) == whole["tokens"][0]


def test_sigma_s_is_bitwise_the_same_on_both_ranks_and_the_single_process_s_to_rounding(forwards, float64_forwards):
    ranks, single = forwards
    for micro_batch, whole in enumerate(single):
        first, second = (seen[micro_batch]["sigma"] for seen in ranks)
        assert torch.equal(first, second)
        # the same tokens packed 4 to a row on each rank, 8 to a row in the single process: apart by no more than
        # ROUNDING_FACTOR times the single process's own fp32 rounding, its distance from its float64 twin (the
        # ranks' own tokens alone would be another matrix)
        twin = float64_forwards[micro_batch]["sigma"].double()
        torch.testing.assert_close(first, whole["sigma"], rtol=0,
                                   atol=ROUNDING_FACTOR * fp32_rounding(whole["sigma"], twin))
    # re-estimated after epoch 1 from the trained model: a new matrix, again the same on both ranks
    assert torch.equal(ranks[0][0]["sigma"], ranks[0][1]["sigma"])
    assert not torch.equal(ranks[0][1]["sigma"], ranks[0][2]["sigma"])


# ------------------------------------------------------------ a multi-task grid cell's lock
def test_every_rank_of_a_grid_cell_leaves_it_to_the_invocation_holding_its_lock(tiny_bert, shared_data, tmp_path):
    """Another invocation (this process) holds the cell's run directory: rank 0 finds its lock taken and every rank
    leaves the cell, none trains it alone (and waits on a collective rank 0 never joins)."""
    run_dir = tmp_path / "cell"
    write_snapshot(run_dir, compose(tiny_overrides(tiny_bert, shared_data, run_dir)))
    with RunDirLock(run_dir), workers.rendezvous() as port:
        mp.spawn(workers.cell_worker, args=(port, str(run_dir), str(tmp_path)), nprocs=workers.WORLD_SIZE, join=True)
    returned = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(workers.WORLD_SIZE)]
    assert returned == [{"skipped": RUNNING_ELSEWHERE}] * workers.WORLD_SIZE
    assert not (run_dir / "config.yaml").exists()  # no rank started the run


# ------------------------------------------------------------ leaving the group at exit
GLOO_THREADS = {"pt_gloo_runloop", "gloo_tcp_loop"}  # the names gloo gives its worker and transport threads


def test_a_rank_leaving_the_group_after_a_run_ends_gloos_threads_before_the_interpreter_finalizes(
        tiny_bert, shared_data, tmp_path):
    """A gloo thread still running at finalization can drop a finished collective's tensors then, which takes the GIL
    and aborts the process (SIGABRT): leaving the group at exit ends them, the finished run's wrapper held them."""
    overrides = tiny_overrides(tiny_bert, shared_data, tmp_path / "run", "optim.epochs=1")
    with workers.rendezvous() as port:
        mp.spawn(workers.leave_after_fit, args=(port, overrides, str(tmp_path)), nprocs=workers.WORLD_SIZE, join=True)
    for rank in range(workers.WORLD_SIZE):
        threads = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert GLOO_THREADS <= set(threads["finished"]), threads  # the threads checked below exist during the run
        assert not GLOO_THREADS & set(threads["left"]), threads


# ------------------------------------------------------------ a real torchrun training run
@pytest.mark.slow  # torchrun, two ranks, beside a single-process run
@pytest.mark.parametrize("padding_free", ["false", "true"])  # padded and padding-free batches
def test_two_rank_torchrun_run_matches_one_process_at_the_same_global_batch(tiny_bert, shared_data, tmp_path,
                                                                            padding_free):
    mode = f"model.padding_free={padding_free}"  # padding-free: each rank packs its own micro-batch
    overrides = tiny_overrides(tiny_bert, shared_data, tmp_path / "ddp", mode)  # 48 examples = 6 global batches of 8
    process = start_torchrun("-m", "istar_plugin.cli", *overrides)
    single = Trainer(compose(tiny_overrides(tiny_bert, shared_data, tmp_path / "single", mode))).fit()
    twin = Trainer(compose(tiny_overrides(tiny_bert, shared_data, tmp_path / "float64", mode)))
    twin.model.double()  # the single-process run in float64 (its criterion scores in float32, as in every run)
    twin = twin.fit()
    code, stdout, stderr = finish(process, timeout=240)
    assert code == 0, stderr[-3000:]
    assert stdout.count("results: ") == 1  # only rank 0 reports and writes
    ddp = json.loads((tmp_path / "ddp" / "results.json").read_text())
    assert [h["step"] for h in ddp["history"]] == [h["step"] for h in single["history"]] == [0, 3, 6]
    records = {}
    for name in ("ddp", "single", "float64"):
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        records[name] = [r for r in map(json.loads, lines) if "train/loss" in r]
    assert [r["step"] for r in records["ddp"]] == [1, 2, 3, 4, 5, 6]  # logged once per step, by rank 0
    # The two ranks compute the same training as the single process in other fp32 reduction orders (each rank's
    # micro-batch padded or packed on its own, gradients and the pooled covariance summed over ranks): the ranks'
    # results lie within ROUNDING_FACTOR times the single process's own rounding, its largest relative distance
    # from its float64 twin over every number compared, as measured on this CPU
    evaluated = ("eval_isoscore_star", "eval_isoscore_star_per_layer")
    trained = ("train/loss", "train/task_loss", "train/isoscore_star", "train/grad_norm")

    def numbers(history, steps):
        return [x for entry in history for key in evaluated for x in np.atleast_1d(entry[key])] + [
            step[key] for step in steps for key in trained]

    allowed = ROUNDING_FACTOR * relative_rounding(numbers(single["history"], records["single"]),
                                                  numbers(twin["history"], records["float64"]))
    for ours, theirs in zip(ddp["history"], single["history"]):
        assert ours["accuracy"] == theirs["accuracy"]
        for key in evaluated:
            assert ours[key] == pytest.approx(theirs[key], rel=allowed, abs=0), (ours["step"], key)
    for ours, theirs in zip(records["ddp"], records["single"]):
        for key in trained:
            assert ours[key] == pytest.approx(theirs[key], rel=allowed, abs=0), (ours["step"], key)


# ------------------------------------------------------------ failures end the job
@pytest.mark.slow  # two spawned ranks, one failing
def test_a_failing_rank_ends_the_other_with_a_clear_error_not_a_hang(tiny_bert, shared_data, tmp_path):
    overrides = tiny_overrides(tiny_bert, shared_data, tmp_path / "run", *FAILING_RUN)
    context = mp.get_context("spawn")
    with workers.rendezvous() as port:
        started = time.monotonic()
        processes = [context.Process(target=workers.failing_fit, args=(rank, port, overrides, str(tmp_path)))
                     for rank in range(workers.WORLD_SIZE)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=max(1.0, 120 - (time.monotonic() - started)))
        alive = [process.pid for process in processes if process.is_alive()]
        for process in processes:
            if process.is_alive():
                process.kill()
    assert not alive, f"ranks still running after 120 s: {alive}"
    assert [process.exitcode for process in processes] == [1, 1]
    ended = [json.loads(line) for line in (tmp_path / "ended.jsonl").read_text().splitlines()]
    assert [entry["rank"] for entry in ended] == [1, 0]  # rank 1 failed first; rank 0 ended because of it
    assert ended[0]["outcome"] == "RuntimeError: simulated failure on rank 1 at step 1"
    # rank 0's next collective fails once rank 1 is gone ("Connection closed by peer ... typically caused by a
    # remote worker crashing"), or times out after ISTAR_DIST_TIMEOUT_S = 15 s: an error, not a hang
    assert "Connection closed by peer" in ended[1]["outcome"] or "timed out" in ended[1]["outcome"].lower(), ended[1]


@pytest.mark.slow  # torchrun, two ranks, one failing
def test_torchrun_tears_down_the_surviving_worker(tiny_bert, shared_data, tmp_path):
    # rank 1 raises at step 1 while rank 0 sleeps 600 s outside any collective: only torchrun can end it
    overrides = tiny_overrides(tiny_bert, shared_data, tmp_path / "run", *FAILING_RUN)
    code, _, stderr = finish(start_torchrun(str(WORKERS), *overrides), timeout=150)
    assert code == 1
    assert "ChildFailedError" in stderr and "[rank1]: RuntimeError: simulated failure on rank 1 at step 1" in stderr
    # SIGTERM from torchrun
    assert re.search(r"rank\s+: 0 \(local_rank: 0\)\s+exitcode\s+: -15", stderr), stderr[-2000:]
