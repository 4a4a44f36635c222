"""Cache adapters: how capture sits in a family's cache, one per cache shape the field uses.

- a dict (held by a module attribute, or reached by a dotted path: a function attribute, an object's
  inner dict) is replaced by a `RecordingDict` holding the same entries: inserts are compiles, and the
  rule's lookup operation (`getitem` or `contains`) inside a dispatch is a dispatch;
- a `functools.cache` function is replaced, for the run, by a front cache of the same kind (an unbounded
  `lru_cache` keyed as the original is) whose misses call the original: the cached call is the compile, and
  the key's fields are named by binding the call to the function's signature, its spelling (which fields
  came positionally, the keywords' order) kept. Each call reaches the original exactly as it was spelled,
  so the program's own cache keys are what they would be without mlacheck.

The hot path of every adapter is two counter steps in `hotpath` (compiled where the build could): a dict
family's lookup is one lookup in the capture's table of variants already seen in serving (`FamilyCapture.fast`,
keyed by the cache key); a functools family's lookup is a hit in the front cache, which answers with a
counting launcher of the variant, so that a dispatch is counted where it launches what it looked up.
Everything else is the slow path, which reads the stack. The table (and the front) is emptied whenever a
phase starts or ends and by every mutation that touches its keys, so a key's first lookup in a new phase is
read from the stack again; a lookup of a key already seen in serving, made outside any dispatch, counts as
a dispatch (dict families).
"""

from __future__ import annotations

import functools
import gc
import inspect
import sys
import weakref
from time import perf_counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from mlacheck.capture import hotpath
from mlacheck.capture.compile_timer import SkippedCompile

MISSING = object()
"""The value a `contains` lookup that found nothing reports (the insert follows)."""

if TYPE_CHECKING:
    from mlacheck.capture.family import FamilyCapture

_getframe = sys._getframe


class RecordingDict:
    """What both dict adapters add to the hot-path dict they extend: inserts reported to the capture, and what
    a mutation touches retired from the fast table; a dict otherwise."""

    __slots__ = ()

    def __init__(self, entries: dict, capture: FamilyCapture) -> None:
        dict.__init__(self, entries)
        self._capture, self._fast, self._ticks = capture, capture.fast, capture.ticks

    def __setitem__(self, key: object, value: object) -> None:
        dict.__setitem__(self, key, value)
        self._fast.pop(key, None)
        self._capture.inserted(key, value, _getframe(1))

    def __delitem__(self, key: object) -> None:
        dict.__delitem__(self, key)
        self._fast.pop(key, None)

    def pop(self, key: object, *default: object) -> object:
        self._fast.pop(key, None)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[object, object]:
        key, value = dict.popitem(self)
        self._fast.pop(key, None)
        return key, value

    def clear(self) -> None:
        dict.clear(self)
        self._fast.clear()

    def update(self, *args: object, **kwargs: object) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: object) -> RecordingDict:
        self.update(other)
        return self

    def setdefault(self, key: object, default: object = None) -> object:
        if not dict.__contains__(self, key):
            self[key] = default
        return dict.__getitem__(self, key)

    def get(self, key: object, default: object = None) -> object:
        """`cache[key]` where the key is cached: a lookup where `[]` is the rule's lookup, not one where `in` is."""
        return self[key] if dict.__contains__(self, key) else default


class GetitemRecordingDict(RecordingDict, hotpath.GetitemDict):
    """The dispatch's lookup is `cache[key]` (tokenspeed_mla prefill: `config not in cache`, then `cache[config]`)."""

    __slots__ = ()

    def _missed(self, key: object, frame) -> object:
        """A lookup the fast table did not serve."""
        return self._capture.looked_up(key, dict.__getitem__(self, key), frame)


class ContainsRecordingDict(RecordingDict, hotpath.ContainsDict):
    """The dispatch's lookup is `key in cache` (FA4: `compile_key not in compile_cache`, its only one under FakeTensorMode)."""

    __slots__ = ()

    def _missed(self, key: object, frame) -> bool:
        """A lookup the fast table did not serve."""
        found = dict.__contains__(self, key)
        self._capture.looked_up(key, dict.__getitem__(self, key) if found else MISSING, frame)
        return found

    def __getitem__(self, key: object) -> object:
        """Not a lookup; but under a launch policy, what a dispatch gets after its `in` is the stand-in."""
        value = dict.__getitem__(self, key)
        if self._capture.launch is None:
            return value
        entry = self._fast.get(key)
        return entry[1] if entry is not None else self._capture.launched(key, value, _getframe(1))


DICT_ADAPTERS = {"getitem": GetitemRecordingDict, "contains": ContainsRecordingDict}


class FunctoolsAdapter:
    """A functools.cache function replaced, for the run, by a front cache of the same kind in front of it.

    The front is an unbounded `functools.lru_cache` keyed exactly as the original (the call's spelling, its
    `typed`), so a hit in it is a hit the original would have had, answered in C. What it holds for a key is a
    launcher: the looked-up value, called through a closure that counts the launch (the dispatch calls what
    the cached call returned). Its misses reach `missed`, which calls the original and reads the stack. A
    value that is looked up outside any dispatch, or that cannot be called, is returned as it is and never held
    by the front (a fresh front takes its place), so that no later dispatch gets it uncounted.
    """

    def __init__(self, original: Callable, capture: FamilyCapture, owner: object, attribute: str) -> None:
        parameters = getattr(original, "cache_parameters", None)
        if parameters is None or not hasattr(original, "cache_clear"):
            raise TypeError(f"{type(original).__name__} is not a functools.cache / lru_cache function")
        if parameters()["maxsize"] is not None:
            raise TypeError(f"it is an lru_cache bounded to {parameters()['maxsize']} entries; mlacheck watches "
                            "unbounded functools caches only")
        self.original = original
        self.signature = inspect.signature(original)
        self.skipped: dict[object, SkippedCompile] = {}
        self.preexisting: set[tuple] = set()  # listed keys cached before install: --compile skip calls through for these
        self.unlisted = 0  # entries cached before install that the interpreter did not let us list
        self.misses = original.cache_info().misses  # the cache's misses when last read: more now means a compile
        self._capture, self._owner, self._attribute = capture, owner, attribute
        self._typed = parameters()["typed"]
        self._fronts: weakref.WeakSet = weakref.WeakSet()
        self.function = self._front()

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

    def forget(self) -> None:
        """Empty the front (and any replaced one a caller still holds): every key's next lookup is a miss that
        reads the stack."""
        for front in list(self._fronts):
            type(front).cache_clear(front)

    def missed(self, args: tuple, kwargs: dict, frame) -> object:
        """A lookup the front did not hold: the original's answer, and what the front holds for this key from now.

        A serving dispatch gets the counting launcher (its launch counts it); a dispatch in another phase, one
        that reads each launch from the stack; anything else the value itself, which the front must not keep."""
        capture, key = self._capture, (args, tuple(kwargs.items()))
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
                return self._launcher(entry)
        return self._reading_launcher(key, value)

    def _value(self, key: tuple, args: tuple, kwargs: dict, frame) -> object:
        """The original's value for the call (a compile where its cache missed); under --compile skip, a key not
        compiled before is recorded and answered with a SkippedCompile."""
        capture, original = self._capture, self.original
        if capture.policy.compile == "skip":
            if key in self.skipped:
                return self.skipped[key]
            if key not in self.preexisting:
                value = self.skipped[key] = SkippedCompile()
                capture.inserted(key, value, frame, seconds=None, origin="skip")
                return value
            return original(*args, **kwargs)
        started = perf_counter()
        value = original(*args, **kwargs)
        seconds = perf_counter() - started
        misses = original.cache_info().misses
        if misses > self.misses:
            self.misses = misses
            capture.inserted(key, value, frame, seconds=seconds, origin="compile")
        return value

    def _reading_launcher(self, key: tuple, value: object) -> Callable:
        """What the front holds for a variant dispatched in a warm-up or capture phase: each launch is read from
        the stack; once one is a serving dispatch, the front is emptied so that the next lookup gets the
        counting launcher."""
        capture, fast = self._capture, self._capture.fast

        def launch(*args: object, **kwargs: object) -> object:
            kernel = capture.looked_up(key, value, _getframe(1))
            if key in fast:
                self.forget()
            return kernel(*args, **kwargs)

        return launch

    def _launcher(self, entry: tuple) -> Callable:
        """The hot path: a launch of a variant seen in serving steps its counter and the ticks, then runs it."""
        counter, kernel = entry
        return hotpath.launcher(counter, kernel, self._capture.ticks, self._capture.maybe_flush)

    def describe(self, key: tuple) -> tuple[dict[str, object], dict]:
        """A call key's fields (defaults applied) and its spelling."""
        args, items = key
        bound = self.signature.bind(*args, **dict(items))
        bound.apply_defaults()
        names = list(self.signature.parameters)
        return dict(bound.arguments), {"positional": names[:len(args)], "keywords": [name for name, _ in items]}

    def cache_clear(self) -> None:
        self.original.cache_clear()
        self.skipped.clear()
        self.misses = self.original.cache_info().misses
        self.preexisting.clear()
        self.unlisted = 0
        self._capture.forget_fast()
        self._capture.cleared()

    def existing_keys(self) -> tuple[list[tuple], int]:
        """Keys cached before install, listed from the C cache where the interpreter allows; and how many there are."""
        count = self.original.cache_info().currsize
        keys = self._listed(count) if count else []
        self.preexisting, self.unlisted = set(keys), count - len(keys)
        return keys, count

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
                rest = parts[cut + 1:]
                keys.append((parts[:cut], tuple(zip(rest[0::2], rest[1::2]))))
            else:
                keys.append((parts, ()))
        return keys
