"""The padding-free attention's grouping of sequences by length (``istar_plugin.models.packing.length_groups``)."""
import itertools

from hypothesis import given
from hypothesis import strategies as st

from istar_plugin.models.packing import length_groups

LENGTHS = st.lists(st.integers(min_value=1, max_value=128), min_size=1, max_size=7)
COSTS = st.integers(min_value=0, max_value=5000)


def cost(lengths, groups, group_cost):
    return sum(len(group) * max(lengths[index] for index in group) ** 2 + group_cost for group in groups)


@given(LENGTHS, COSTS)
def test_the_groups_are_a_partition_of_the_sequences(lengths, group_cost):
    groups = length_groups(lengths, group_cost)
    assert sorted(index for group in groups for index in group) == list(range(len(lengths)))
    assert all(groups)


@given(LENGTHS, COSTS)
def test_the_grouping_costs_the_least_of_every_split_of_the_sorted_lengths(lengths, group_cost):
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    splits = itertools.product((False, True), repeat=len(order) - 1)  # cut after position i or not
    every = []
    for cuts in splits:
        bounds = [0] + [position + 1 for position, cut in enumerate(cuts) if cut] + [len(order)]
        every.append(cost(lengths, [order[start:end] for start, end in zip(bounds, bounds[1:])], group_cost))
    assert cost(lengths, length_groups(lengths, group_cost), group_cost) == min(every)


def test_the_cost_of_a_call_decides_between_one_call_and_one_per_sequence():
    lengths = [40, 3, 38, 4]
    assert length_groups(lengths, group_cost=10**9) == [[0, 2, 3, 1]]  # longest first
    assert length_groups(lengths, group_cost=0) == [[0], [2], [3], [1]]
