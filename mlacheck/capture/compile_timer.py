"""Timing compiles: a compile function wrapped once per process, however many families name it.

A family names its compile function (tokenspeed_mla's `_compile_prefill_kernel`, or `cutlass.cute:compile`
that FA4 calls inline); the value a compile returns is what enters the cache, so an insert finds its
compile time by the identity of the value; the family's capture brackets each compile with a `compile_start` and a
`compile_end` event (`FamilyCapture.compiling`), so that a process that dies in one leaves it behind. Under
`--compile skip` nothing compiles: the wrapper returns a `SkippedCompile` and the key is recorded all the same. A
compile function shared by every caller in the process (cute.compile) is a family's only where its rule's
`compile_callers` call it (through any wrapper of another module); any other call runs untouched (a compile net below
names it).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Protocol

RECENT = 16


class Compiling(Protocol):
    """What a compile timer asks of the family whose compile it times (`FamilyCapture`)."""

    def compiling(self, frame: object) -> AbstractContextManager[int | None]:
        """Around one compile called from `frame`; gives its compile_start's id (None: none written)."""


class SkippedCompile:
    """Stands in for a compiled kernel under `--compile skip`: the key is recorded, nothing is compiled."""

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("mlacheck --compile skip: this variant was not compiled, it cannot launch")


class CompileTimer:
    """The wrapper of one compile function; remembers the compile time of its last few results, and the compile_start
    of each."""

    def __init__(self, owner: object, attribute: str, skip: bool) -> None:
        self.owner, self.attribute, self.skip = owner, attribute, skip
        self.original = getattr(owner, attribute)
        self.users: list[tuple[frozenset[tuple[str, str]] | None, Compiling]] = []  # (its compile callers, None:
        # every caller; the family) per user
        self._recent: OrderedDict[int, tuple[object, float]] = OrderedDict()
        self.wrapper = TimedCompile(self, self.original)

    def compiled(self, family: Compiling, compile_function: Callable, args: tuple, kwargs: dict, frame) -> object:
        """One compile of `family` through `compile_function`, called from `frame`, timed (under --compile skip: none,
        a SkippedCompile instead)."""
        if self.skip:
            return SkippedCompile()
        with watched_compile(), family.compiling(frame) as start:
            started = time.perf_counter()
            kernel = compile_function(*args, **kwargs)
            self._recent[id(kernel)] = (kernel, time.perf_counter() - started, start)
        while len(self._recent) > RECENT:
            self._recent.popitem(last=False)
        return kernel

    def claimant(self, frame) -> Compiling | None:
        """The family whose compile the one called from `frame` is (None: no family's): a user that claims every
        call, else the user one of whose compile callers is the nearest frame in a user's module (module, qualname; a
        name without its class where Python has no co_qualname). Frames of other modules in between are wrappers put
        on the compile function later (vLLM's JIT monitor replaces `cute.compile` after its warm-up)."""
        every = next((family for callers, family in self.users if callers is None), None)
        if every is not None:
            return every
        modules = {module for callers, _ in self.users for module, _ in callers}
        while frame is not None and frame.f_globals.get("__name__") not in modules:
            frame = frame.f_back
        if frame is None:
            return None
        code, module = frame.f_code, frame.f_globals.get("__name__")
        qualname = getattr(code, "co_qualname", None)
        return next(
            (
                family
                for callers, family in self.users
                for name, caller in callers
                if name == module
                and (caller == qualname or (qualname is None and caller.rpartition(".")[2] == code.co_name))
            ),
            None,
        )

    def timed(self, value: object) -> tuple[float, int | None] | None:
        """The compile time of the compile that returned `value` and its compile_start's id, or None if none of ours
        did."""
        recent = self._recent.pop(id(value), None)
        return recent[1:] if recent is not None and recent[0] is value else None


class TimedCompile:
    """What a compile function becomes: a callable that times each compile, and keeps `compile[options]` working
    where the original takes options that way (as CuTe DSL's `cute.compile` does)."""

    def __init__(self, timer: CompileTimer, compile_function: Callable) -> None:
        self._timer, self._compile = timer, compile_function
        functools.update_wrapper(self, compile_function, updated=())

    def __call__(self, *args: object, **kwargs: object) -> object:
        frame = sys._getframe(1)
        family = self._timer.claimant(frame)
        if family is None:
            return self._compile(*args, **kwargs)
        return self._timer.compiled(family, self._compile, args, kwargs, frame)

    def __getitem__(self, options: object) -> TimedCompile:
        return TimedCompile(self._timer, self._compile[options])


_watched = threading.local()


@contextlib.contextmanager
def watched_compile() -> Iterator[None]:
    """A watched family's compile runs in this thread now: a compile net below it leaves the compile to the family."""
    _watched.depth = getattr(_watched, "depth", 0) + 1
    try:
        yield
    finally:
        _watched.depth -= 1


def watching() -> bool:
    """Whether a watched family's compile runs in this thread now."""
    return getattr(_watched, "depth", 0) > 0


_TIMERS: dict[tuple[int, str], CompileTimer] = {}


def acquire(
    owner: object, attribute: str, skip: bool, callers: frozenset[tuple[str, str]] | None, family: Compiling
) -> CompileTimer:
    """The process's timer of `owner.attribute`, installed on first use, for `family`; `callers` (module, qualname):
    the functions whose compiles are the family's (None: every call)."""
    timer = _TIMERS.get((id(owner), attribute))
    if timer is None:
        timer = _TIMERS[(id(owner), attribute)] = CompileTimer(owner, attribute, skip)
        setattr(owner, attribute, timer.wrapper)
    timer.users.append((callers, family))
    return timer


def release(timer: CompileTimer, family: Compiling) -> None:
    """Give the compile function back once its last family is removed."""
    timer.users = [user for user in timer.users if user[1] is not family]
    if not timer.users:
        _TIMERS.pop((id(timer.owner), timer.attribute), None)
        if getattr(timer.owner, timer.attribute) is timer.wrapper:
            setattr(timer.owner, timer.attribute, timer.original)
