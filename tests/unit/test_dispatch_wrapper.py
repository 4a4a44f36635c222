"""The dispatch wrapper (the hot path's forwarder, compiled and pure Python): every argument forwarded as the
original takes it, the original's signature, raised and lookup-less calls reported."""

import copy
import functools
import inspect
import itertools
import pickle
import sys

import pytest

from tests.unit.hotpaths import COMPILED, HOTPATHS, PYTHON


@pytest.fixture(params=HOTPATHS, ids=lambda hot: hot.__name__)
def hot(request):
    return request.param


@pytest.fixture
def forwarder(hot):
    return hot.forwarder if hot is PYTHON else hot.Forwarder


@pytest.fixture
def counter(hot):
    """The implementation's counter (the compiled one steps its own; it also takes any iterator)."""
    return hot.counter if hot is PYTHON else hot.Counter


def shipped(x):
    return x


def plain(a, b, c=3, *, d=4, e):
    return ("plain", a, b, c, d, e)


def positional_only(a, b=2, /, c=3, *rest, key=None, **extra):
    return ("positional_only", a, b, c, rest, key, extra)


@pytest.mark.parametrize(
    "function, calls",
    [
        (plain, [((1, 2), {"e": 5}), ((1,), {"b": 2, "c": 9, "d": 8, "e": 7})]),
        (positional_only, [((1,), {}), ((1, 2, 3, 4, 5), {"key": "k", "z": 1})]),
    ],
)
def test_forwards_every_spelling_and_keeps_the_signature(forwarder, function, calls, counter):
    counter, ticks, raised = counter(), counter(), []
    wrapper = functools.update_wrapper(forwarder(function, counter, ticks, lambda *args: raised.append(args)), function)
    assert inspect.signature(wrapper) == inspect.signature(function)
    for args, kwargs in calls:
        assert wrapper(*args, **kwargs) == function(*args, **kwargs)
    assert next(counter) == len(calls) and raised == []
    with pytest.raises(TypeError):
        wrapper()  # a missing argument is the same error as without the wrapper


def test_the_generated_wrapper_binds_a_call_before_its_body():
    """The pure-Python wrapper refuses a call its signature refuses before counting it; the compiled one lets
    the original refuse it, and reports that as a call that raised before its lookup."""
    raised = []
    wrapper = PYTHON.forwarder(plain, itertools.count(), itertools.count(), lambda *args: raised.append(args))
    with pytest.raises(TypeError):
        wrapper()
    assert raised == []


def test_default_objects_are_the_originals(forwarder, counter):
    def mutable_default(a, seen=[]):  # noqa: B006 - the same default object must reach the original
        seen.append(a)
        return seen

    wrapper = forwarder(mutable_default, counter(), counter(), lambda *args: None)
    assert wrapper(1) is wrapper(2) and mutable_default.__defaults__[0] == [1, 2]


def test_an_exception_in_the_original_is_reported_and_re_raised(forwarder, counter):
    raised = []

    def failing(x, y=1):
        raise ValueError(f"bad {x}")

    ticks = counter()
    wrapper = forwarder(failing, counter(), ticks, lambda error, start, frame: raised.append((error, start, frame)))
    with pytest.raises(ValueError, match="bad 3") as caught:
        wrapper(3)
    [(error, start, frame)] = raised
    assert error is caught.value and start == 0
    assert frame.f_code is test_an_exception_in_the_original_is_reported_and_re_raised.__code__
    assert caught.traceback[-1].name == "failing"  # the traceback still reaches where it was raised


@pytest.mark.skipif(COMPILED is None, reason="this build has no compiled hot path")
def test_a_failing_hook_never_replaces_the_programs_outcome(monkeypatch):
    """A capture hook that raises (they catch their own) is reported as unraisable; the program's exception
    stands. (In the pure-Python wrapper the hook's exception would chain onto the program's.)"""

    def failing(x):
        raise ValueError("the program's")

    def broken_hook(*args):
        raise RuntimeError("the hook's")

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    wrapper = COMPILED.Forwarder(failing, COMPILED.Counter(), COMPILED.Counter(), broken_hook)
    with pytest.raises(ValueError, match="the program's"):
        wrapper(1)
    [report] = unraisable
    assert isinstance(report.exc_value, RuntimeError) and report.object is broken_hook


@pytest.mark.parametrize("generated", [True, False])
def test_a_call_that_returns_without_a_lookup_is_reported_where_asked(forwarder, generated, counter):
    ticks, unlooked = counter(), []

    def dispatch(x, look=True):
        if look:
            next(ticks)  # what a lookup does to the shared ticks
        return x

    def clashing(x, _mlacheck_look=True):  # a parameter named like the wrapper's own: the *args wrapper
        return dispatch(x, _mlacheck_look)

    wrapper = forwarder(dispatch if generated else clashing, counter(), ticks, lambda *args: None, unlooked.append)
    assert wrapper(1) == 1 and wrapper(2, False) == 2 and wrapper(3) == 3
    assert (
        len(unlooked) == 1
        and unlooked[0].f_code is test_a_call_that_returns_without_a_lookup_is_reported_where_asked.__code__
    )


@pytest.mark.parametrize("outcome", ["returned", "raised"])
def test_another_threads_lookup_is_not_this_calls_lookup(hot, forwarder, outcome):
    """The ticks are each thread's own: a call held open while another thread looks up (steps the ticks) is still
    a call that returned without a lookup, or raised before it (code-review.md smell 4)."""
    import threading

    ticks = hot.ticks() if hot is PYTHON else hot.Ticks()
    entered, release, unlooked, raised = threading.Event(), threading.Event(), [], []

    def dispatch(x):
        entered.set()
        release.wait(10)
        if outcome == "raised":
            raise ValueError(x)
        return x

    def on_raise(error, start, frame):
        raised.append((start, next(ticks)))  # what the capture asks in the raising thread: did it reach a lookup?

    wrapper = forwarder(dispatch, itertools.count(), ticks, on_raise, unlooked.append)
    worker = threading.Thread(
        target=lambda: pytest.raises(ValueError, wrapper, 1) if outcome == "raised" else wrapper(1)
    )
    worker.start()
    entered.wait(10)
    for _ in range(3):
        next(ticks)  # another thread's lookups meanwhile
    release.set()
    worker.join()
    if outcome == "returned":
        assert len(unlooked) == 1 and raised == []
    else:
        assert raised == [(0, 1)] and unlooked == []  # its own entry alone: it died before a lookup


def test_parameters_named_like_the_wrappers_builtins_are_forwarded(forwarder, counter):
    """A parameter named `next` or `BaseException` shadows nothing the wrapper's body uses (redteam.md section 5)."""

    def named(x, next=40, BaseException=2):  # noqa: A002
        if x is None:
            raise ValueError("no input")
        return x + next + BaseException

    raised = []
    wrapper = forwarder(named, counter(), counter(), lambda *args: raised.append(args), lambda frame: None)
    assert wrapper(0) == 42 and wrapper(0, next=1, BaseException=1) == 2 and wrapper(0, 5, 6) == 11
    with pytest.raises(ValueError):
        wrapper(None)
    assert len(raised) == 1


def test_a_clashing_parameter_name_gets_the_args_kwargs_wrapper():
    def clashing(x, _mlacheck_look=True):
        return x

    generated = PYTHON.forwarder(plain, itertools.count(), itertools.count(), lambda *args: None)
    fallback = PYTHON.forwarder(clashing, itertools.count(), itertools.count(), lambda *args: None)
    assert inspect.signature(generated) == inspect.signature(plain)
    kinds = [parameter.kind for parameter in inspect.signature(fallback).parameters.values()]
    assert kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD] and fallback(4) == 4


def test_it_binds_as_a_method_does(forwarder, counter):
    calls = counter()

    class Engine:
        def run(self, x):
            return (self, x)

    Engine.run = forwarder(Engine.run, calls, counter(), lambda *args: None)
    engine = Engine()
    assert engine.run(2) == (engine, 2) and Engine.run(engine, 3) == (engine, 3) and next(calls) == 2


def test_it_pickles_and_copies_as_the_function_does(forwarder, monkeypatch, counter):
    """By reference to its module and name: a spawned child unpickles what its module holds there."""
    wrapper = functools.update_wrapper(forwarder(shipped, counter(), counter(), lambda *args: None), shipped)
    monkeypatch.setitem(globals(), "shipped", wrapper)
    assert pickle.loads(pickle.dumps(wrapper)) is wrapper and copy.deepcopy(wrapper) is wrapper
