"""Kind "functools": a `functools.cache` function (tokenspeed_mla decode's `_get_compiled_mla_kernel`) replaced, for
the run, by a front cache of the same kind in front of it.

The front is an unbounded `functools.lru_cache` keyed exactly as the original (the call's spelling, its `typed`),
so a hit in it is a hit the original would have had, answered in C. What it holds for a key is a launcher: the
looked-up value, called through the hot path's counting launcher (the dispatch calls what the cached call
returned). Its misses call the original as the call was spelled, so the program's own cache keys are what they
would be without mlacheck, and read the stack. A value that is looked up outside any dispatch, or that cannot be
called, is returned as it is and never held by the front (a fresh front takes its place), so that no later
dispatch gets it uncounted. The key's fields are named by binding the call to the function's signature; its
spelling (which fields came positionally, the keywords' order) is kept.
"""

from __future__ import annotations

import functools
import gc
import inspect
import sys
import weakref
from collections.abc import Callable, Collection
from time import perf_counter

from mlacheck.capture import compile_timer, hotpath
from mlacheck.capture.compile_timer import SkippedCompile
from mlacheck.capture.hooks import CaptureHooks
from mlacheck.capture.install import Patches
from mlacheck.rulefiles.plain import Family

_getframe = sys._getframe


def call_fields(signature: inspect.Signature, args: tuple, items: tuple) -> tuple[dict[str, object], dict]:
    """A call's key (its positional arguments, its keyword items) as fields by name, defaults applied, and its
    spelling (which fields came positionally, the keywords' order)."""
    bound = signature.bind(*args, **dict(items))
    bound.apply_defaults()
    names = list(signature.parameters)
    return dict(bound.arguments), {"positional": names[: len(args)], "keywords": [name for name, _ in items]}


class FunctoolsCache:
    """The adapter of a functools cache."""

    def __init__(self, family: Family, module: object, capture: CaptureHooks, patches: Patches) -> None:
        self.family, self.capture, self.patches = family, capture, patches
        path, _, self._attribute = family.cache.rpartition(".")
        self._owner = patches.resolve(module, path)
        self.original: Callable = patches.attribute(self._owner, self._attribute)
        self.skipped: dict[object, SkippedCompile] = {}
        self._preexisting: set[tuple] = (
            set()
        )  # listed keys cached before install: --compile skip calls through for these
        self._unlisted = 0  # entries cached before install that the interpreter did not let us list
        self._compiled: set[tuple] = set()  # keys the original compiled through a front
        self._fronts: weakref.WeakSet = weakref.WeakSet()

    @staticmethod
    def check(family: Family) -> str | None:
        return None

    def install(self) -> None:
        original = self.original
        parameters = getattr(original, "cache_parameters", None)
        where = f"{self.family.module}.{self.family.cache}"
        if parameters is None or not hasattr(original, "cache_clear"):
            raise self.patches.stale(
                f"{where}: {type(original).__name__} is not a functools.cache / lru_cache function"
            )
        if parameters()["maxsize"] is not None:
            raise self.patches.stale(
                f"{where}: it is an lru_cache bounded to {parameters()['maxsize']} entries; mlacheck "
                "watches unbounded functools caches only"
            )
        self.signature = inspect.signature(original)
        self.misses = original.cache_info().misses  # the cache's misses when last read: more now means a compile
        self._typed = parameters()["typed"]
        self.function = self._front()
        self.patches.replace(self._owner, self._attribute, self.function)
        self.patches.on_undo(self._check_bypass)

    def preexisting(self) -> tuple[list[tuple], int]:
        """Keys cached before install, listed from the C cache where the interpreter allows; and how many there are."""
        count = self.original.cache_info().currsize
        keys = self._listed(count) if count else []
        self._preexisting, self._unlisted = set(keys), count - len(keys)
        return keys, count

    def describe(self, key: tuple) -> tuple[dict[str, object], dict]:
        return call_fields(self.signature, *key)

    def cached(self, keys: Collection) -> list:
        """Those of `keys` that the cache holds now (a skipped compile is not held)."""
        return [key for key in keys if key not in self.skipped]

    def forget(self) -> None:
        """Empty the front (and any replaced one a caller still holds): every key's next lookup is a miss that
        reads the stack."""
        for front in list(self._fronts):
            type(front).cache_clear(front)

    def cache_clear(self) -> None:
        self.original.cache_clear()
        self.skipped.clear()
        self.misses = self.original.cache_info().misses
        self._preexisting.clear()
        self._compiled.clear()
        self._unlisted = 0
        self.capture.forget_fast()
        self.capture.cleared()

    # -- the front --------------------------------------------------------------------------------------------
    def _front(self) -> Callable:
        """A new, empty front cache, with the original's name, signature and cache methods."""
        missed = self.missed

        def front_miss(*args: object, **kwargs: object) -> object:
            return missed(args, kwargs, _getframe(1))

        front = functools.lru_cache(maxsize=None, typed=self._typed)(front_miss)
        self._fronts.add(front)
        functools.update_wrapper(front, self.original)
        front.cache_info, front.cache_clear = self.original.cache_info, self.cache_clear
        return front

    def renew(self) -> None:
        """Put a new, empty front in place (used where the current one is about to hold a value it must not)."""
        self.function = self._front()
        setattr(self._owner, self._attribute, self.function)

    def missed(self, args: tuple, kwargs: dict, frame) -> object:
        """A lookup the front did not hold: the original's answer, and what the front holds for this key from now.

        A serving dispatch gets the counting launcher (its launch counts it); a dispatch in another phase, one
        that reads each launch from the stack; anything else the value itself, which the front must not keep."""
        capture, key = self.capture, (args, tuple(kwargs.items()))
        value = self._value(key, args, kwargs, frame)
        where = capture.where(frame)
        if where is None or where.dispatch_depth is None or not callable(value):
            capture.safely("lookup", self.renew)
            # where the stack could not be read, that is an internal error already (the run is incomplete)
            return value if where is None else capture.looked_up(key, value, frame, where)
        if where.phase is None:
            if key not in capture.fast:
                capture.looked_up(key, value, frame, where, count=False)
            entry = capture.fast.get(key)
            if entry is not None:
                counter, kernel = entry
                return hotpath.launcher(counter, kernel, capture.ticks, capture.maybe_flush)
        return self._reading_launcher(key, value)

    def _value(self, key: tuple, args: tuple, kwargs: dict, frame) -> object:
        """The original's value for the call (a compile where its cache missed); under --compile skip, a key not
        compiled before is recorded and answered with a SkippedCompile."""
        capture, original = self.capture, self.original
        if capture.policy.compile == "skip":
            if key in self.skipped:
                return self.skipped[key]
            if key not in self._preexisting:
                value = self.skipped[key] = SkippedCompile()
                capture.inserted(key, value, frame, seconds=None, origin="skip")
                return value
            return original(*args, **kwargs)
        fresh = key not in self._compiled and key not in self._preexisting  # the original may compile it now
        with compile_timer.watched_compile(), capture.compiling(frame, key, fresh):
            started = perf_counter()
            value = original(*args, **kwargs)
            seconds = perf_counter() - started
        misses = original.cache_info().misses
        if misses > self.misses:
            self.misses = misses
            self._compiled.add(key)
            capture.inserted(key, value, frame, seconds=seconds, origin="compile")
        return value

    def _reading_launcher(self, key: tuple, value: object) -> Callable:
        """What the front holds for a variant dispatched in a warm-up or capture phase: each launch is read from
        the stack; once one is a serving dispatch, the front is emptied so that the next lookup gets the
        counting launcher."""
        capture, fast = self.capture, self.capture.fast

        def launch(*args: object, **kwargs: object) -> object:
            kernel = capture.looked_up(key, value, _getframe(1))
            if key in fast:
                self.forget()
            return kernel(*args, **kwargs)

        return launch

    def _check_bypass(self) -> None:
        """At remove: entries the original holds that no call through the front accounts for."""
        known = len(self._preexisting | self._compiled) + self._unlisted
        size = self.original.cache_info().currsize
        if size > known:
            self.capture.internal_error(
                "remove",
                f"{size - known} variant(s) entered {self.family.module}."
                f"{self.family.cache} through a reference to the cached function taken "
                "before mlacheck was installed",
            )

    def _listed(self, count: int) -> list[tuple]:
        """The C cache's keys as call keys, found among the wrapper's referents; [] where that is not unambiguous."""
        referents = gc.get_referents(self.original)
        marks = [item for item in referents if type(item) is object]
        own = getattr(self.original, "__dict__", None)
        caches = [item for item in referents if type(item) is dict and item is not own and len(item) == count]
        if len(marks) != 1 or len(caches) != 1:
            return []
        keys = []
        for raw in caches[0]:
            parts = raw if type(raw) is tuple else (raw,)
            if marks[0] in parts:
                cut = parts.index(marks[0])
                rest = parts[cut + 1 :]
                keys.append((parts[:cut], tuple(zip(rest[0::2], rest[1::2]))))
            else:
                keys.append((parts, ()))
        return keys
