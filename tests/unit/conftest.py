"""Fixtures of the capture tests on synthetic families (tests/fixtures/synthetic_harness.py)."""

import pytest

from tests.fixtures.synthetic_harness import KINDS, reset_all


@pytest.fixture(autouse=True)
def empty_caches():
    """Every synthetic family's cache empty before and after each test."""
    reset_all()
    yield
    reset_all()


@pytest.fixture(params=KINDS, ids=lambda kind: kind.name)
def kind(request):
    """Each cache kind in turn: a module dict, a dict reached by a dotted path, a functools.cache function, a dict in
    a closure cell, a dict held by a class attribute."""
    return request.param
