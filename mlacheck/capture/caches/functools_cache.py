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
import itertools
import sys
import weakref
from collections.abc import Callable, Collection
from time import perf_counter

from mlacheck.capture import compile_timer, hotpath
from mlacheck.capture.compile_timer import SkippedCompile
from mlacheck.capture.hooks import CaptureHooks
from mlacheck.capture.install import AlreadyRecorded, Patches
from mlacheck.keys import key_text, typed
from mlacheck.rulefiles.plain import Family

_getframe = sys._getframe
_ABSENT = object()


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
        self._accounted: set = set()  # the store's keys that install or a call through a front accounts for
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
        if getattr(original, "_mlacheck_front", False):
            raise AlreadyRecorded(f"{self.family.name}: {where} is already being recorded")
        self.signature = inspect.signature(original)
        self._typed = parameters()["typed"]
        self._store, self._mark, self._function = _internals(original)
        if self._store is None or not _keys_as_the_cache_builds_them(self._typed):
            raise self.patches.stale(
                f"{where}: this interpreter's functools cache does not let mlacheck read its entries, so its "
                "compiles cannot be attributed to their calls"
            )
        self._accounted = set(self._store)
        self.function = self._front()
        self.patches.replace(self._owner, self._attribute, self.function, self._ours)

    def preexisting(self) -> tuple[list[tuple], int]:
        """Keys cached before install (as call keys), and how many there are."""
        keys = [_call_key(stored, self._mark, self._typed) for stored in self._accounted]
        return keys, len(keys)

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
        self._accounted.clear()
        self.capture.forget_fast()
        self.capture.cleared()

    def superseded(self) -> None:
        """A newer adapter watches the function the program's module holds now (it ran again); nothing to do."""

    def audit(self) -> list[str]:
        """What entered the program's cache past every front since the last audit (one line, naming the keys)."""
        unseen = [stored for stored in list(self._store) if stored not in self._accounted]
        if not unseen:
            return []
        self._accounted.update(unseen)
        keys = ", ".join(key_text(self._fields(_call_key(stored, self._mark, self._typed))) for stored in unseen)
        return [
            f"{len(unseen)} variant(s) entered {self.family.module}.{self.family.cache} past mlacheck (through a "
            f"reference to the cached function taken before it was installed): {keys}; whether they compiled on "
            "the serving path is unknown"
        ]

    # -- the front --------------------------------------------------------------------------------------------
    def _front(self) -> Callable:
        """A new, empty front cache, with the original's name, signature and cache methods."""
        missed = self.missed

        def front_miss(*args: object, **kwargs: object) -> object:
            return missed(args, kwargs, _getframe(1))

        front = functools.lru_cache(maxsize=None, typed=self._typed)(front_miss)
        self._fronts.add(front)
        functools.update_wrapper(front, self.original)
        front._mlacheck_front = True
        front.cache_info, front.cache_clear = self.original.cache_info, self.cache_clear
        return front

    def renew(self) -> None:
        """Put a new, empty front in place (used where the current one is about to hold a value it must not)."""
        self.function = self._front()
        self.patches.put(self._owner, self._attribute, self.function, self._ours)

    def _ours(self, value: object) -> bool:
        """Whether a value is one of this adapter's fronts (the program may put back one it held)."""
        return any(value is front for front in self._fronts)

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
        """The program's cache's value for the call: the stored one, or the function's result, made in this call (a
        compile, reported) and stored as the cache stores it. Under --compile skip a key the cache does not hold is
        recorded and answered with a SkippedCompile, and a key it holds (cached before install, listed or not) is
        answered from it, never taken for a compile."""
        stored = _stored_key(args, kwargs, self._mark, self._typed)
        value = self._store.get(stored, _ABSENT)
        if value is not _ABSENT:
            return value
        capture = self.capture
        if capture.policy.compile == "skip":
            if key not in self.skipped:
                self.skipped[key] = SkippedCompile()
                capture.inserted(key, self.skipped[key], frame, seconds=None, origin="skip")
            return self.skipped[key]
        with compile_timer.watched_compile(), capture.compiling(frame, key) as start:
            started = perf_counter()
            value = self._function(*args, **kwargs)
            seconds = perf_counter() - started
        self._store[stored] = value
        self._accounted.add(stored)
        capture.inserted(key, value, frame, seconds=seconds, origin="compile", start=start)
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

        return functools.update_wrapper(launch, value)  # (it shows what it stands for, as the hot path's do)

    def _fields(self, key: tuple) -> dict:
        try:
            return {name: typed(value) for name, value in self.describe(key)[0].items()}
        except TypeError:  # not a call of the function's signature (a bypass with other arguments)
            return {"arguments": typed([*key[0], *(value for _, value in key[1])])}


def _internals(cached: Callable) -> tuple[dict | None, object, Callable | None]:
    """The C cache's own dict, its keyword mark and the function it calls, found among the wrapper's referents;
    (None, None, None) where they are not unambiguous (not CPython's C cache)."""
    if not isinstance(cached, _C_CACHE):
        return None, None, None
    referents = gc.get_referents(cached)
    own = getattr(cached, "__dict__", None)
    stores = [item for item in referents if type(item) is dict and item is not own]
    marks = [item for item in referents if type(item) is object]
    function = getattr(cached, "__wrapped__", None)
    if len(stores) != 1 or len(marks) != 1 or not any(item is function for item in referents):
        return None, None, None
    return stores[0], marks[0], function


_C_CACHE = type(functools.lru_cache(maxsize=None)(len))


def _stored_key(args: tuple, kwargs: dict, mark: object, typed: bool) -> object:
    """The key CPython's C cache stores a call under (`lru_cache_make_key`)."""
    if not kwargs and not typed:
        if len(args) == 1 and type(args[0]) in (int, str):
            return args[0]
        return args
    key = args + ((mark, *itertools.chain.from_iterable(kwargs.items())) if kwargs else ())
    if typed:
        key += tuple(type(arg) for arg in args) + tuple(type(value) for value in kwargs.values())
    return key


def _call_key(stored: object, mark: object, typed: bool) -> tuple:
    """A stored key back as (positional arguments, keyword items)."""
    parts = stored if type(stored) is tuple else (stored,)
    cut = next((index for index, part in enumerate(parts) if part is mark), None)
    if cut is not None:
        rest = parts[cut + 1 :]
        keywords = (len(rest) - cut) // 3 if typed else len(rest) // 2
        return parts[:cut], tuple(zip(rest[0 : 2 * keywords : 2], rest[1 : 2 * keywords : 2]))
    return (parts[: len(parts) // 2] if typed else parts), ()


@functools.cache
def _keys_as_the_cache_builds_them(typed: bool) -> bool:
    """Whether `_stored_key` builds the keys this interpreter's C cache stores (checked on a probe cache, once)."""
    probe = functools.lru_cache(maxsize=None, typed=typed)(lambda *args, **kwargs: None)
    store, mark, _ = _internals(probe)
    if store is None:
        return False
    calls = [((1,), {}), (("s",), {}), ((1.5,), {}), ((1, 2), {}), ((1,), {"b": 2, "a": "x"}), ((), {"b": 3})]
    for args, kwargs in calls:
        probe(*args, **kwargs)
    built = [_stored_key(args, kwargs, mark, typed) for args, kwargs in calls]
    decoded = [_call_key(key, mark, typed) for key in built]
    return list(store) == built and decoded == [(args, tuple(kwargs.items())) for args, kwargs in calls]
