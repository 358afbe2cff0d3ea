"""The shared test helpers' own examples run and print what they say."""
import doctest

import helpers


def test_helper_examples_run():
    result = doctest.testmod(helpers)
    assert result.attempted >= 2 and result.failed == 0
