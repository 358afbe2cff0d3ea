"""Two ranks on gloo (CPU) training padding-free: each rank packs its own micro-batch into its row, the
two micro-batches of a step together the single process's, and the I-STAR penalty's Sigma_S bitwise the same on
both ranks (estimated from packed batches). Exact resume and the two-rank runs matching one process are the
existing tests, parametrized over model.padding_free: tests/test_trainer.py and tests/test_distributed.py."""
import distributed_workers as workers
import pytest
import torch
import torch.multiprocessing as mp

from istar_plugin.config import compose
from istar_plugin.training.trainer import Trainer

from test_distributed import tiny_overrides


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
    torch.distributed.barrier()  # an orderly end: no rank tears down gloo while another still works
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def forwards(tiny_bert, shared_data, tmp_path_factory):
    """Both ranks' training forward passes (spawned processes) and the single process's, run meanwhile: 16
    examples, global batches of 8 in 2 micro-batches per step, 2 epochs (Sigma_S from every training token before
    each, in batches of 8)."""
    def overrides(output_dir):
        return tiny_overrides(tiny_bert, shared_data, output_dir, "model.padding_free=true",
                              "data.max_train_samples=16", "data.max_eval_samples=8", "eval_before_training=false")

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


def test_sigma_s_is_bitwise_the_same_on_both_ranks_and_the_single_process_s_to_rounding(forwards):
    ranks, single = forwards
    for micro_batch, whole in enumerate(single):
        first, second = (seen[micro_batch]["sigma"] for seen in ranks)
        assert torch.equal(first, second)
        # the same tokens packed 4 to a row on each rank, 8 to a row in the single process: fp32 rounding (measured
        # within 2.4e-7, entries up to 1.0; the ranks' own tokens alone would be another matrix)
        torch.testing.assert_close(first, whole["sigma"], rtol=0, atol=1e-6)
    # re-estimated after epoch 1 from the trained model: a new matrix, again the same on both ranks
    assert torch.equal(ranks[0][0]["sigma"], ranks[0][1]["sigma"])
    assert not torch.equal(ranks[0][1]["sigma"], ranks[0][2]["sigma"])
