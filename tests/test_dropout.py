"""``model.fast_dropout``: dropout's masks from random bits, the same distribution as torch's, on every model."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from istar_plugin.models.dropout import RESOLUTION, Dropout, bits_dropout, use_fast_dropout
from istar_plugin.models.encoder import HFEncoder, ModelConfig


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 23), min_size=1, max_size=3), p=st.floats(1 / RESOLUTION, 1 - 1 / RESOLUTION),
       seed=st.integers(0, 2**31))
def test_each_element_is_zeroed_or_scaled_by_the_kept_shares_inverse_and_so_is_its_gradient(shape, p, seed):
    inputs = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(seed)
    out = bits_dropout(inputs, p)
    out.backward(torch.ones_like(out))
    threshold = round(p * RESOLUTION)
    scale = RESOLUTION / (RESOLUTION - threshold)
    kept = out != 0
    assert out.shape == inputs.shape and out.dtype == inputs.dtype
    assert torch.equal(out[kept], inputs.detach()[kept] * scale) and not out[~kept].any()
    assert torch.equal(inputs.grad, kept.double() * scale)
    torch.manual_seed(seed)
    assert torch.equal(bits_dropout(inputs, p), out)  # torch's generator: the seed decides the masks


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 3 / RESOLUTION])
def test_the_share_dropped_is_p_and_the_mean_is_kept(p):
    torch.manual_seed(0)
    count = 1_000_001  # odd: the last word's second draw unused
    out = bits_dropout(torch.ones(count), p)
    dropped = float((out == 0).double().mean())
    assert abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / count) + 0.5 / RESOLUTION
    assert abs(float(out.double().mean()) - 1) < 5 * math.sqrt(p / (1 - p) / count)


def test_consecutive_draws_are_independent():
    torch.manual_seed(0)
    kept = (bits_dropout(torch.ones(400_000), 0.5) != 0).double()
    correlation = torch.corrcoef(torch.stack([kept[:-1], kept[1:]]))[0, 1]  # the two draws of a word, and across
    assert abs(float(correlation)) < 5 / math.sqrt(len(kept))


@pytest.mark.parametrize("p, training", [(0.0, True), (0.3, False), (1.0, True), (0.5 / RESOLUTION, True)])
def test_where_bits_have_no_gain_it_is_torchs_own_dropout(p, training):
    inputs = torch.randn(64, 8)
    torch.manual_seed(3)
    expected = torch.nn.functional.dropout(inputs, p, training)
    torch.manual_seed(3)
    assert torch.equal(bits_dropout(inputs, p, training), expected)


def test_a_model_built_with_fast_dropout_has_no_torch_dropout_left_and_computes_the_same_in_eval(tiny_bert):
    batch = {"input_ids": torch.tensor([[101, 2023, 2003, 102], [101, 2307, 102, 0]]),
             "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])}
    models = {}
    for fast in (True, False):
        torch.manual_seed(0)
        models[fast] = HFEncoder(ModelConfig(name_or_path=str(tiny_bert), fast_dropout=fast), "classification")
    kinds = {fast: {type(module) for module in model.modules()} for fast, model in models.items()}
    assert Dropout in kinds[True] and torch.nn.Dropout not in kinds[True]
    assert Dropout not in kinds[False] and torch.nn.Dropout in kinds[False]
    ps = {fast: sorted(module.p for module in model.modules() if isinstance(module, torch.nn.Dropout))
          for fast, model in models.items()}
    assert ps[True] == ps[False] and ps[True]  # Dropout is a torch.nn.Dropout of the same p
    logits = [model.eval()(batch).logits for model in models.values()]
    assert torch.equal(*logits)
    torch.manual_seed(1)
    train_logits = models[True].train()(batch).logits
    assert torch.isfinite(train_logits).all() and not torch.equal(train_logits, logits[0])


def test_use_fast_dropout_replaces_every_torch_dropout_and_says_how_many():
    inner = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.3))
    model = torch.nn.Sequential(torch.nn.Dropout(0.1), inner)
    assert use_fast_dropout(model) == 2
    assert [type(module) for module in model.modules()].count(Dropout) == 2 and model[1][1].p == 0.3
    assert use_fast_dropout(model) == 0  # already replaced
