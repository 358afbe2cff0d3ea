"""The paired comparison against Base (istar_plugin.reports.comparisons.paired): the batched confusion metrics equal the
task metrics, the interval matches the closed form where one exists, and the verdicts follow the intervals."""
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from istar_plugin import metrics
from istar_plugin.reports.comparisons.paired import (CONFUSION_METRICS, hierarchical_bootstrap, paired_difference,
                                                     pooled_bootstrap)

labels = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=60)


def confusion(predictions, references, classes):
    matrix = np.zeros((1, len(classes), len(classes)), dtype=np.int64)
    for p, r in zip(predictions, references):
        matrix[0, classes.index(p), classes.index(r)] += 1
    return matrix


@settings(max_examples=200, deadline=None)
@given(labels)
def test_batched_confusion_metrics_equal_the_task_metrics(pairs):
    predictions, references = [p for p, _ in pairs], [r for _, r in pairs]
    classes = sorted(set(predictions) | set(references))
    matrix = confusion(predictions, references, classes)
    positive = classes.index(1) if 1 in classes else None
    for name, reference in [("accuracy", metrics.accuracy), ("f1", metrics.binary_f1),
                            ("matthews_correlation", metrics.matthews_correlation)]:
        expected = reference(predictions, references)
        assert CONFUSION_METRICS[name](matrix, positive)[0] == pytest.approx(expected, abs=1e-12)


def test_one_seed_interval_matches_the_normal_interval_of_a_paired_proportion():
    """One seed, 4,000 examples: the accuracy difference is the mean of d_i = correct_method - correct_base, whose
    95% interval is mean ± 1.96 sd(d) / sqrt(n); the bootstrap's percentile interval agrees within 5% of its width."""
    rng = random.Random(7)
    n = 4000
    references = [rng.randint(0, 1) for _ in range(n)]
    method = [r if rng.random() < 0.80 else 1 - r for r in references]
    base = [r if rng.random() < 0.76 else 1 - r for r in references]
    d = np.array([(m == r) - (b == r) for m, b, r in zip(method, base, references)], dtype=float)
    half = 1.959964 * d.std(ddof=1) / math.sqrt(n)
    low, high = hierarchical_bootstrap([(method, base, references)], "accuracy", rounds=4000, seed=3)
    assert (low + high) / 2 == pytest.approx(d.mean(), abs=0.05 * 2 * half)
    assert high - low == pytest.approx(2 * half, rel=0.05)


def test_identical_runs_differ_by_nothing_and_are_not_distinguishable():
    references = [0, 1, 1, 0] * 30
    runs = {seed: ([1 - r if i % 5 == seed else r for i, r in enumerate(references)], references) for seed in (1, 2, 3)}
    result = paired_difference("mrpc", "f1", runs, runs)
    assert (result.low, result.high, result.differences) == (0.0, 0.0, (0.0, 0.0, 0.0))
    assert result.verdict == "not distinguishable" and result.resampled == "seeds and examples"


def test_verdicts_follow_the_interval_and_swapping_the_runs_flips_the_signs():
    references = [0, 1] * 100
    good = {seed: (references[: 180 + seed] + [1 - r for r in references[180 + seed:]], references)
            for seed in (1, 2, 3)}
    poor = {seed: (references[: 120 + seed] + [1 - r for r in references[120 + seed:]], references)
            for seed in (1, 2, 3)}
    better, worse = paired_difference("rte", "accuracy", good, poor), paired_difference("rte", "accuracy", poor, good)
    assert better.differences == pytest.approx((30.0, 30.0, 30.0)) and better.verdict == "better"
    assert worse.differences == pytest.approx((-30.0, -30.0, -30.0)) and worse.verdict == "worse"
    assert better.low == pytest.approx(-worse.high, abs=1.5) and better.high == pytest.approx(-worse.low, abs=1.5)
    assert better.text().startswith("+30.00 [+") and better.text().endswith("] better")


def test_without_predictions_only_the_seeds_are_resampled():
    scores = ({1: 70.0, 2: 72.0, 3: 69.0}, {1: 68.0, 2: 70.5, 3: 70.0})
    no_outcomes = {1: None, 2: None, 3: None}
    result = paired_difference("rte", "accuracy", no_outcomes, dict(no_outcomes), scores=scores)
    assert result.resampled == "seeds" and result.differences == pytest.approx((2.0, 1.5, -1.0))
    assert -1.0 <= result.low <= result.mean <= result.high <= 2.0 and result.verdict == "not distinguishable"


def test_only_common_seeds_are_paired_and_unequal_references_fall_back_to_seeds():
    a, b = [0, 1] * 10, [1, 0] * 10
    assert paired_difference("rte", "accuracy", {1: (a, a)}, {2: (a, a)}) is None
    result = paired_difference("rte", "accuracy", {1: (a, a), 2: (a, a)}, {1: (a, b), 3: (a, a)},
                               scores=({1: 100.0, 2: 100.0}, {1: 0.0, 3: 100.0}))
    assert result.seeds == (1,) and result.resampled == "seeds" and result.differences == (100.0,)
    # one pair of runs and no examples resampled: an interval of no width, and no verdict drawn from it
    assert (result.low, result.high, result.verdict) == (100.0, 100.0, "undefined (one seed)")


def test_one_seed_with_its_examples_resampled_is_labelled_examples_only_and_decides_nothing_over_seeds():
    references = [0, 1] * 200
    result = paired_difference("rte", "accuracy", {1: (references, references)}, {1: ([0] * 400, references)})
    assert result.resampled == "examples only" and result.low > 0
    assert result.verdict == "better (one seed: examples only)" and not result.decided
    assert result.text().startswith("+50.00 [+4") and result.text().endswith("] better (one seed: examples only)")
    two = paired_difference("rte", "accuracy", {1: (references, references), 2: (references, references)},
                            {1: ([0] * 400, references), 2: ([0] * 400, references)})
    assert (two.resampled, two.verdict, two.decided) == ("seeds and examples", "better", True)


def test_regression_metrics_resample_seeds_only():
    scores = ({1: 80.0, 2: 81.0}, {1: 79.0, 2: 79.5})
    runs = {1: ([0.1, 0.5], [0.2, 0.4]), 2: ([0.3, 0.2], [0.2, 0.4])}
    result = paired_difference("stsb", "pearson", runs, runs, scores=scores)
    assert result.resampled == "seeds" and result.differences == pytest.approx((1.0, 1.5))


@given(st.lists(st.tuples(st.floats(0.5, 50.0), st.integers(1, 40)), min_size=2, max_size=30),
       st.floats(-1.0, 1.0), st.integers(1, 3))
def test_a_constant_per_token_shift_in_nll_is_exactly_the_interval_of_nll_per_token(texts, shift, seeds):
    base = [nll for nll, _ in texts]
    tokens = [count for _, count in texts]
    method = [nll + shift * count for nll, count in texts]  # every token costs `shift` nats more
    low, high = pooled_bootstrap([(method, base, tokens)] * seeds, "nll_per_token", rounds=200)
    assert low == pytest.approx(shift, abs=1e-9) and high == pytest.approx(shift, abs=1e-9)
    swapped = pooled_bootstrap([(base, method, tokens)] * seeds, "perplexity", rounds=200)
    forward = pooled_bootstrap([(method, base, tokens)] * seeds, "perplexity", rounds=200)
    assert swapped == pytest.approx((-forward[1], -forward[0]))  # the same draws, the other way round


def test_perplexity_pairs_resample_texts_and_a_lower_perplexity_is_better():
    tokens = [10] * 200
    base = [10 * 3.0] * 200  # 3 nats a token: perplexity e^3
    noisy = [10 * (3.0 + (0.2 if i % 2 else -0.2)) for i in range(200)]  # the same on average, text by text noise
    better = [10 * 2.9] * 200
    outcome = lambda nll: (tuple(nll), tuple(tokens))  # noqa: E731
    same = paired_difference("lm", "perplexity", {1: outcome(noisy), 2: outcome(noisy)},
                             {1: outcome(base), 2: outcome(base)})
    lower = paired_difference("lm", "perplexity", {1: outcome(better)}, {1: outcome(base)})
    assert same.resampled == "seeds and examples" and same.verdict == "not distinguishable" and same.low < 0 < same.high
    assert lower.differences[0] == pytest.approx(math.exp(2.9) - math.exp(3.0)) and lower.verdict == (
        "better (one seed: examples only)")
