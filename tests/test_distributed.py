"""Distributed training with real processes on gloo (CPU): Sigma_S and the penalty pooled over ranks equal one
process's on the concatenated cloud, a torchrun run matches one process at the same global batch (padded and
padding-free), and a failing rank ends the job instead of hanging it."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import distributed_workers as workers
import pytest
import torch
import torch.multiprocessing as mp

from istar_plugin.config import compose
from istar_plugin.criterions.shrinkage import estimate_shrinkage_covariance
from istar_plugin.isotropy import isoscore_star
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments

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
    for rank, result in enumerate(rank_results):  # the criterion scores in float32
        local = isoscore_star(clouds[rank], shrinkage, workers.ZETA).item()
        assert result["criterion"]["pooled"] == pytest.approx(pooled, abs=1e-6)
        assert result["criterion"]["local"] == pytest.approx(local, abs=1e-6)
    assert abs(rank_results[0]["criterion"]["local"] - rank_results[1]["criterion"]["local"]) > 0.05


# ------------------------------------------------------------ a real torchrun training run
@pytest.mark.slow  # torchrun, two ranks, beside a single-process run
@pytest.mark.parametrize("padding_free", ["false", "true"])  # padded and padding-free batches
def test_two_rank_torchrun_run_matches_one_process_at_the_same_global_batch(tiny_bert, shared_data, tmp_path,
                                                                            padding_free):
    mode = f"model.padding_free={padding_free}"  # padding-free: each rank packs its own micro-batch
    overrides = tiny_overrides(tiny_bert, shared_data, tmp_path / "ddp", mode)  # 48 examples = 6 global batches of 8
    process = start_torchrun("-m", "istar_plugin.cli", *overrides)
    single = Trainer(compose(tiny_overrides(tiny_bert, shared_data, tmp_path / "single", mode))).fit()
    code, stdout, stderr = finish(process, timeout=240)
    assert code == 0, stderr[-3000:]
    assert stdout.count("results: ") == 1  # only rank 0 reports and writes
    ddp = json.loads((tmp_path / "ddp" / "results.json").read_text())
    assert [h["step"] for h in ddp["history"]] == [h["step"] for h in single["history"]] == [0, 3, 6]
    for ours, theirs in zip(ddp["history"], single["history"]):
        # measured: accuracy equal, IsoScore* within 1.5e-8 (padding to each local batch's longest sentence
        # changes fp32 rounding, 6 steps carry it into the weights, and each evaluation batch's covariance
        # is formed in float32 before the float64 merge); asserted with a margin
        assert ours["accuracy"] == theirs["accuracy"]
        assert ours["eval_isoscore_star"] == pytest.approx(theirs["eval_isoscore_star"], abs=1e-7)
        assert ours["eval_isoscore_star_per_layer"] == pytest.approx(theirs["eval_isoscore_star_per_layer"], abs=1e-7)
    records = {}
    for name in ("ddp", "single"):
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        records[name] = [r for r in map(json.loads, lines) if "train/loss" in r]
    assert [r["step"] for r in records["ddp"]] == [1, 2, 3, 4, 5, 6]  # logged once per step, by rank 0
    # global-batch means; measured (fp32) within 2.4e-7 padded, 6e-7 padding-free (grad_norm, about 1.3: 5 ulps)
    for ours, theirs in zip(records["ddp"], records["single"]):
        for key in ("train/loss", "train/task_loss", "train/isoscore_star", "train/grad_norm"):
            assert ours[key] == pytest.approx(theirs[key], abs=1e-6), key


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
