"""Every example written in the package's docstrings runs and prints what it says."""
import doctest
import importlib
import pkgutil

import pytest

import istar_plugin

MODULES = sorted(info.name for info in pkgutil.walk_packages(istar_plugin.__path__, "istar_plugin."))


def test_the_package_has_docstring_examples_to_run():
    found = sum(len(doctest.DocTestFinder().find(importlib.import_module(name))) for name in MODULES)
    assert found >= 20


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0
