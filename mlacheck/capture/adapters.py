"""Cache adapters: how capture sits in a family's cache, one per cache shape the field uses.

- a dict (held by a module attribute, or reached by a dotted path: a function attribute, an object's
  inner dict) is replaced by a `RecordingDict` holding the same entries: inserts are compiles, and the
  rule's lookup operation (`getitem` or `contains`) inside a dispatch is a dispatch;
- a `functools.cache`/`lru_cache` function is replaced by a recording function for the run: the cached
  call is the compile, and the key's fields are named by binding the call to the function's signature,
  its spelling (which fields came positionally, the keywords' order) kept. The call is forwarded exactly
  as it was spelled, so the program's own cache keys are what they would be without mlacheck.

The hot path of every adapter is one lookup in the capture's table of variants already seen in serving
(`FamilyCapture.fast`) and two C-level counter steps; everything else is the slow path, which reads the
stack. A dict family's table is keyed by the cache key; a functools family's by the identity of the
cached value (one compiled kernel per entry), so that no key is built for a hit. The table is emptied
whenever a phase starts or ends and by every mutation that touches its keys, so a key's first lookup in a
new phase is read from the stack again; a lookup of a key already seen in serving, made outside any
dispatch, counts as a dispatch.
"""

from __future__ import annotations

import gc
import inspect
import sys
from time import perf_counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from mlacheck.capture.compile_timer import SkippedCompile

MISSING = object()
"""The value a `contains` lookup that found nothing reports (the insert follows)."""

if TYPE_CHECKING:
    from mlacheck.capture.family import FamilyCapture

_getframe = sys._getframe
FLUSH_EVERY = 1023  # the fast path asks for a (time-bounded) counts flush every 1024 dispatches of a variant


class RecordingDict(dict):
    """A dict that reports inserts to its capture and retires what a mutation touches; a dict otherwise."""

    __slots__ = ("_capture", "_fast", "_ticks")

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


class GetitemRecordingDict(RecordingDict):
    """The dispatch's lookup is `cache[key]` (tokenspeed_mla prefill: `config not in cache`, then `cache[config]`)."""

    __slots__ = ()

    def __getitem__(self, key: object) -> object:
        entry = self._fast.get(key)
        if entry is not None:
            if next(entry[0]) & FLUSH_EVERY == FLUSH_EVERY:
                self._capture.maybe_flush()
            next(self._ticks)
            return entry[1]
        return self._capture.looked_up(key, dict.__getitem__(self, key), _getframe(1))


class ContainsRecordingDict(RecordingDict):
    """The dispatch's lookup is `key in cache` (FA4: `compile_key not in compile_cache`, its only one under FakeTensorMode)."""

    __slots__ = ()

    def __contains__(self, key: object) -> bool:
        entry = self._fast.get(key)
        if entry is not None:
            if next(entry[0]) & FLUSH_EVERY == FLUSH_EVERY:
                self._capture.maybe_flush()
            next(self._ticks)
            return True
        found = dict.__contains__(self, key)
        self._capture.looked_up(key, dict.__getitem__(self, key) if found else MISSING, _getframe(1))
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
    """A functools.cache / lru_cache function replaced, for the run, by a recording function."""

    def __init__(self, original: Callable, capture: FamilyCapture) -> None:
        if not (hasattr(original, "cache_info") and hasattr(original, "cache_clear")):
            raise TypeError(f"{type(original).__name__} is not a functools.cache / lru_cache function")
        self.original = original
        self.signature = inspect.signature(original)
        self.skipped: dict[object, SkippedCompile] = {}
        self.preexisting: set[tuple] = set()  # listed keys cached before install: --compile skip calls through for these
        self.unlisted = 0  # entries cached before install that the interpreter did not let us list
        self.misses = original.cache_info().misses  # the cache's misses when last read: more now means a compile
        self._capture = capture
        self.function = self._recording_function()

    def _recording_function(self) -> Callable:
        original, capture, slow = self.original, self._capture, self.call
        fast, ticks = capture.fast, capture.ticks
        if capture.policy.compile == "skip":  # nothing may be compiled, so a key is looked at before the call
            def recording(*args: object, **kwargs: object) -> object:
                return slow((args, tuple(kwargs.items())), args, kwargs, _getframe(1))
        else:
            def recording(*args: object, **kwargs: object) -> object:
                started = perf_counter()
                value = original(*args, **kwargs)
                entry = fast.get(id(value))
                if entry is not None:
                    if next(entry[0]) & FLUSH_EVERY == FLUSH_EVERY:
                        capture.maybe_flush()
                    next(ticks)
                    return entry[1]
                return self.called((args, tuple(kwargs.items())), value, perf_counter() - started, _getframe(1))

        recording.__wrapped__ = original
        recording.__name__ = getattr(original, "__name__", "recording")
        recording.__qualname__ = getattr(original, "__qualname__", recording.__name__)
        recording.__doc__ = getattr(original, "__doc__", None)
        recording.cache_info = original.cache_info
        recording.cache_clear = self.cache_clear
        recording.cache_parameters = getattr(original, "cache_parameters", None)
        return recording

    def called(self, key: tuple, value: object, seconds: float, frame) -> object:
        """The slow path of a real call, whose value is not in the fast table: a compile when the cache missed."""
        misses = self.original.cache_info().misses
        if misses > self.misses:
            self.misses = misses
            self._capture.inserted(key, value, frame, seconds=seconds, origin="compile")
        return self._capture.looked_up(key, value, frame, fast_key=id(value))

    def call(self, key: tuple, args: tuple, kwargs: dict, frame) -> object:
        """--compile skip: a key not compiled before is recorded and answered with a SkippedCompile."""
        capture, original = self._capture, self.original
        if key in self.skipped:
            return capture.looked_up(key, self.skipped[key], frame)
        if key not in self.preexisting:
            result = self.skipped[key] = SkippedCompile()
            capture.inserted(key, result, frame, seconds=None, origin="skip")
            return capture.looked_up(key, result, frame)
        return capture.looked_up(key, original(*args, **kwargs), frame)

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
        self._capture.fast.clear()
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
