"""The pytest plugin makes its report with the garbage collector paused and leaves the collector of the pytest process
as it found it (on or off), whatever the report does."""

import gc

import pytest

from mlacheck.pytest_plugin import _without_collections


@pytest.fixture
def restored():
    enabled = gc.isenabled()
    yield
    gc.enable() if enabled else gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_report_is_made_with_collections_off_and_the_state_comes_back(restored, enabled):
    gc.enable() if enabled else gc.disable()
    assert _without_collections(gc.isenabled) is False
    assert gc.isenabled() is enabled


def test_the_state_comes_back_when_the_report_raises(restored):
    gc.enable()

    def broken() -> None:
        raise RuntimeError("the report failed")

    with pytest.raises(RuntimeError):
        _without_collections(broken)
    assert gc.isenabled()
