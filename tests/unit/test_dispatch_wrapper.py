"""The dispatch wrapper: the original's own signature, every argument forwarded as the original takes it."""

import inspect
import itertools

import pytest

from mlacheck.capture.dispatch import _forwarding


def record(calls, *args, **kwargs):
    calls.append((args, kwargs))


def plain(a, b, c=3, *, d=4, e):
    return ("plain", a, b, c, d, e)


def positional_only(a, b=2, /, c=3, *rest, key=None, **extra):
    return ("positional_only", a, b, c, rest, key, extra)


def mutable_default(a, seen=[]):  # noqa: B006 - the same default object must reach the original
    seen.append(a)
    return seen


@pytest.mark.parametrize("function, calls", [
    (plain, [((1, 2), {"e": 5}), ((1,), {"b": 2, "c": 9, "d": 8, "e": 7})]),
    (positional_only, [((1,), {}), ((1, 2, 3, 4, 5), {"key": "k", "z": 1})]),
])
def test_forwards_every_spelling_and_keeps_the_signature(function, calls):
    counter, ticks, raised = itertools.count(), itertools.count(), []
    wrapper = _forwarding(function, counter, ticks, lambda *args: raised.append(args))
    assert inspect.signature(wrapper) == inspect.signature(function)
    for args, kwargs in calls:
        assert wrapper(*args, **kwargs) == function(*args, **kwargs)
    assert next(counter) == len(calls) and raised == []
    with pytest.raises(TypeError):
        wrapper()  # a missing argument is the same error as without the wrapper
    assert raised == []  # raised while binding the call: neither the wrapper's body nor the original ran


def test_default_objects_are_the_originals():
    wrapper = _forwarding(mutable_default, itertools.count(), itertools.count(), lambda *args: None)
    assert wrapper(1) is wrapper(2) and mutable_default.__defaults__[0] == [1, 2]


def test_an_exception_in_the_original_is_reported_and_re_raised():
    raised = []

    def failing(x, y=1):
        raise ValueError(f"bad {x}")

    ticks = itertools.count()
    wrapper = _forwarding(failing, itertools.count(), ticks, lambda error, start, frame: raised.append((error, start)))
    with pytest.raises(ValueError, match="bad 3"):
        wrapper(3)
    [(error, start)] = raised
    assert isinstance(error, ValueError) and start == 0


@pytest.mark.parametrize("generated", [True, False])
def test_a_call_that_returns_without_a_lookup_is_reported_where_asked(generated):
    ticks, unlooked = itertools.count(), []

    def dispatch(x, look=True):
        if look:
            next(ticks)  # what a lookup does to the shared ticks
        return x

    def clashing(x, _mlacheck_look=True):  # a parameter named like the wrapper's own: the *args wrapper
        return dispatch(x, _mlacheck_look)

    wrapper = _forwarding(dispatch if generated else clashing, itertools.count(), ticks, lambda *args: None,
                          unlooked.append)
    assert (inspect.signature(wrapper) == inspect.signature(dispatch)) is generated
    assert wrapper(1) == 1 and wrapper(2, False) == 2 and wrapper(3) == 3
    assert len(unlooked) == 1 and unlooked[0].f_code is test_a_call_that_returns_without_a_lookup_is_reported_where_asked.__code__
