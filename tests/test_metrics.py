"""Metrics against hand-computed values and against scikit-learn / scipy as oracles."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from istar_plugin import metrics


def label_pairs(num_labels: int):
    """Equal-length lists of predicted and gold label ids."""
    return st.integers(1, 60).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, num_labels - 1), min_size=n, max_size=n),
            st.lists(st.integers(0, num_labels - 1), min_size=n, max_size=n),
        )
    )


# Scores on a coarse grid so that ties (and average ranks) are common.
score_pairs = st.integers(3, 60).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 10).map(lambda k: k / 2), min_size=n, max_size=n),
        st.lists(st.floats(0, 5, allow_nan=False), min_size=n, max_size=n),
    )
)


def test_hand_computed_classification_values():
    predictions, references = [1, 1, 0, 0, 1, 0], [1, 0, 0, 1, 1, 0]
    # TP=2, FP=1, FN=1, TN=2
    assert metrics.accuracy(predictions, references) == pytest.approx(4 / 6)
    assert metrics.binary_f1(predictions, references) == pytest.approx(2 / 3)
    assert metrics.matthews_correlation(predictions, references) == pytest.approx(
        (2 * 2 - 1 * 1) / math.sqrt(3 * 3 * 3 * 3)
    )


def test_collapsed_means_one_predicted_class_or_value():
    assert metrics.collapsed("classification", [1, 1, 1]) is True
    assert metrics.collapsed("regression", [0.2, 0.3]) is False and metrics.collapsed("extractive_qa", ["a"]) is None


def test_hand_computed_correlations_with_ties():
    assert metrics.average_ranks([3.0, 1.0, 3.0, 2.0, 3.0]) == [4.0, 1.0, 4.0, 2.0, 4.0]
    # x = 1..4, y = 2, 4, 5, 9: deviations (-1.5, -.5, .5, 1.5) and (-3, -1, 0, 4): sxy = 11, sxx = 5, syy = 26
    assert metrics.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(5 * 26))
    # ranks of (1, 2, 2, 3) are (1, 2.5, 2.5, 4); of (1, 3, 2, 4) are themselves
    expected = metrics.pearson([1, 2.5, 2.5, 4], [1, 3, 2, 4])
    assert metrics.spearman([1, 2, 2, 3], [10, 30, 20, 40]) == pytest.approx(expected)
    assert expected == pytest.approx(0.9486832980505138)


def test_undefined_correlations_are_none_and_matthews_zero_as_scikit_learn_has_it():
    assert metrics.matthews_correlation([1, 1, 1], [1, 0, 1]) == 0.0
    assert metrics.matthews_correlation([0, 0], [0, 0]) == 0.0
    assert metrics.pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) is None
    assert metrics.spearman([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]) is None
    # a run's results.json: null, as istar-embed and the sentence-transformers engine write an undefined correlation
    assert metrics.compute("stsb", [2.5, 2.5, 2.5], [1.0, 2.0, 3.0]) == {"pearson": None, "spearman": None,
                                                                         "combined_score": None}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_regression_predictions_score_nan_not_perfect(bad):
    # A diverged STS-B model: clamping NaN would report a perfect correlation of 1.0.
    scores = metrics.compute("stsb", [0.5, bad, 3.0, 4.5], [0.4, 2.0, 3.1, 4.4])
    assert all(math.isnan(scores[name]) for name in ("pearson", "spearman", "combined_score")), scores


def test_f1_without_true_positive_is_zero():
    assert metrics.binary_f1([0, 0, 0], [1, 0, 1]) == 0.0
    assert metrics.binary_f1([0, 0], [0, 0]) == 0.0


@pytest.mark.filterwarnings("ignore:A single label was found")
@given(label_pairs(2))
def test_binary_metrics_match_sklearn(pair):
    predictions, references = pair
    assert metrics.accuracy(predictions, references) == pytest.approx(accuracy_score(references, predictions))
    assert metrics.binary_f1(predictions, references) == pytest.approx(
        f1_score(references, predictions, zero_division=0)
    )
    assert metrics.matthews_correlation(predictions, references) == pytest.approx(
        matthews_corrcoef(references, predictions), abs=1e-12
    )


@pytest.mark.filterwarnings("ignore:A single label was found")
@given(label_pairs(5))
def test_multiclass_matthews_matches_sklearn(pair):
    predictions, references = pair
    assert metrics.matthews_correlation(predictions, references) == pytest.approx(
        matthews_corrcoef(references, predictions), abs=1e-12
    )


def test_a_constant_side_whose_mean_rounds_off_its_value_is_undefined():
    """Three equal references whose float mean is not their value: the spread is rounding, not variation."""
    constant = [3.596533681286293] * 3
    assert sum(constant) / 3 != constant[0]
    assert metrics.pearson([0.0, 0.0, 0.5], constant) is None and metrics.spearman([0.0, 0.0, 0.5], constant) is None


@given(score_pairs)
def test_correlations_match_scipy(pair):
    predictions, references = pair
    if len(set(predictions)) < 2 or len(set(references)) < 2:
        assert metrics.pearson(predictions, references) is None
        return
    assert metrics.pearson(predictions, references) == pytest.approx(
        stats.pearsonr(predictions, references)[0], abs=1e-9
    )
    tiny = [p * 1e-160 for p in predictions]  # spreads whose squares underflow: the correlation is scale-free
    assert metrics.pearson(tiny, references) == pytest.approx(
        stats.pearsonr(predictions, references)[0], abs=1e-9
    )
    assert metrics.spearman(predictions, references) == pytest.approx(
        stats.spearmanr(predictions, references)[0], abs=1e-9
    )
    assert metrics.average_ranks(predictions) == pytest.approx(list(stats.rankdata(predictions, method="average")))


@pytest.mark.parametrize(
    "raw, normalized",
    [
        ("The Denver Broncos", "denver broncos"),
        ("  an   apple, a day.", "apple day"),
        ("Theatre of the Absurd", "theatre of absurd"),
        ("U.S.-born", "usborn"),
        ("A", ""),
    ],
)
def test_squad_normalization(raw, normalized):
    assert metrics.normalize_answer(raw) == normalized


def test_squad_scores_hand_computed():
    predictions = ["Denver Broncos", "the big red dog", "Paris", "Carolina"]
    references = [["denver broncos!", "Broncos"], ["a red dog", "dog"], ["London"], ["Carolina Panthers", "Panthers"]]
    # exact: 1, 0, 0, 0. f1: 1; big red dog vs red dog -> p=2/3 r=1 -> 0.8; 0; carolina vs carolina panthers -> 2/3
    result = metrics.compute("squad", predictions, references)
    assert result == pytest.approx({"exact_match": 25.0, "f1": 100 * (1 + 0.8 + 0 + 2 / 3) / 4})
    assert set(result) == {"exact_match", "f1"}


def test_compute_returns_each_tasks_metrics_and_combined_score():
    assert metrics.compute("sst2", [1, 0, 1, 1], [1, 0, 0, 1]) == {"accuracy": 0.75}
    mrpc = metrics.compute("mrpc", [1, 0, 1, 1], [1, 0, 0, 1])
    assert mrpc == pytest.approx({"accuracy": 0.75, "f1": 0.8, "combined_score": 0.775})
    stsb = metrics.compute("stsb", [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 5.0, 9.0])
    assert stsb["spearman"] == 1.0
    assert stsb["combined_score"] == pytest.approx((stsb["pearson"] + 1.0) / 2)
    assert set(metrics.compute("cola", [1, 0], [1, 0])) == {"matthews_correlation"}
    assert metrics.metric_names("qqp") == ("accuracy", "f1", "combined_score")
    assert metrics.metric_names("squad") == ("exact_match", "f1")


def test_compute_rejects_bad_input():
    with pytest.raises(KeyError, match="unknown_task.*known tasks: cola, lm, mnli"):
        metrics.compute("unknown_task", [1], [1])
    with pytest.raises(ValueError, match="2 predictions but 3 references"):
        metrics.compute("sst2", [1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="no predictions"):
        metrics.compute("sst2", [], [])
    with pytest.raises(TypeError, match="reference 0 must be a non-empty list of answer strings"):
        metrics.compute("squad", ["Paris"], ["Paris"])
    with pytest.raises(TypeError, match="prediction 1 must be an answer string"):
        metrics.compute("squad", ["Paris", 3], [["Paris"], ["3"]])
