"""One Triton kernel as a kernel family in one process: its variants, counts and events; and the dicts that count
its cache hits.

Each `@triton.jit` kernel that compiles or launches is a family of its own, `triton:<module>.<qualname>`, keyed by
its parameters as Triton specialized them (`keys.describe`); an `@triton.autotune` kernel's tuning cache is another,
`triton:<module>.<qualname>:autotune`, keyed by its tuning key. A family writes the same events as a rule file's
family (`mlacheck.events`): `family` once, `compile` when a variant enters the cache, `dispatch` at the first lookup
of a variant in each phase, `counts` (cumulative) when flushed.

Hits are counted where Triton looks its caches up: a kernel's `kernel_cache.get(key)` in `JITFunction.run`, an
autotuner's `key not in self.cache` in `Autotuner.run`. The dicts below stand in for those caches; a variant seen
in serving is served from the dict's fast table (a counter step), every other lookup reaches the capture, which
reads the stack. Every lookup of a counting dict is counted, so a warm-up variant that no launch hit is dead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from mlacheck.capture import hotpath
from mlacheck.capture.counts import Counts
from mlacheck.capture.hotpath_py import FLUSH_EVERY
from mlacheck.capture.stack import Where
from mlacheck.keys import typed

_getframe = sys._getframe


class CountingCache(hotpath.GetDict):
    """A kernel's `kernel_cache` on one device (the first item of `JITFunction.device_caches[device]`): a dict whose
    `get` of a cached key, `JITFunction.run`'s only lookup, is a counted hit (`hotpath.GetDict`: a variant seen in
    serving is served from the fast table, (counter, kernel), without a Python frame where the hot path is
    compiled). A write to a key takes the key out of the fast table."""

    __slots__ = ("_owner",)

    def _missed(self, key: object, frame: object) -> object:
        return self._capture.looked_up(self, key, None, frame)

    def __setitem__(self, key: object, value: object) -> None:
        dict.__setitem__(self, key, value)
        self._fast.pop(key, None)

    def __delitem__(self, key: object) -> None:
        dict.__delitem__(self, key)
        self._fast.pop(key, None)

    def pop(self, key: object, *default: object) -> object:
        self._fast.pop(key, None)
        return dict.pop(self, key, *default)

    def clear(self) -> None:
        dict.clear(self)
        self._fast.clear()


class TuningCache(dict):
    """An autotuner's `cache` (tuning key -> chosen config): `key in cache` is a counted hit, an insert is a tuning."""

    __slots__ = ("_fast", "_capture", "_owner")

    def __contains__(self, key: object) -> bool:
        counter = self._fast.get(key)
        if counter is not None:
            if next(counter) & FLUSH_EVERY == FLUSH_EVERY:
                self._capture.maybe_flush()
            return True
        return self._capture.tuning_looked_up(self, key, _getframe(1))

    def __setitem__(self, key: object, value: object) -> None:
        dict.__setitem__(self, key, value)
        self._capture.tuned(self, key, _getframe(1))


def counting(kind: type, entries: dict, capture: object, owner: object) -> dict:
    """A counting dict of `kind` holding `entries`, reporting to `capture` for `owner` (a JITFunction or Autotuner)."""
    cache = kind(entries)
    cache._fast, cache._capture, cache._owner = hotpath.FastTable() if kind is CountingCache else {}, capture, owner
    if kind is CountingCache:
        cache._ticks = hotpath.counter()
    return cache


class KernelFamily:
    """One kernel (or one autotuner) of one process: its variant numbers, counters and events."""

    def __init__(
        self,
        name: str,
        kernel: str,
        key_fields: list[str],
        describe: Callable[[object], dict],
        write: Callable[[dict], None],
        version: str | None,
    ) -> None:
        self.name, self.kernel, self.key_fields, self.version = name, kernel, key_fields, version
        self._describe, self._write = describe, write
        self.vids: dict[object, int] = {}
        self.described: list[dict] = []
        self.counts = Counts()
        self.caches: dict[int, dict] = {}  # id -> the counting dicts of its caches (their fast tables)
        self.every_lookup_counted = True
        self._first: set[tuple[int, str]] = set()

    def family_event(self, preexisting: int) -> None:
        self._write(
            {
                "type": "family",
                "family": self.name,
                "distribution": "triton",
                "version": self.version,
                "providers": [],
                "key_fields": list(self.key_fields),
                "cache_kind": "triton",
                "fingerprint": None,
                "preexisting": preexisting,
                "kernel": self.kernel,
                "every_lookup_counted": self.every_lookup_counted,
            }
        )

    def vid(self, key: object) -> int:
        vid = self.vids.get(key)
        if vid is None:
            fields = {name: typed(value) for name, value in self._describe(key).items()}
            vid = self.vids[key] = len(self.described)
            self.described.append(fields)
        return vid

    def compiled(self, key: object, phase: str, seconds: float | None, origin: str, where: Where | None) -> None:
        """A variant entered the cache."""
        vid = self.vid(key)
        self._write(
            {
                "type": "compile",
                "family": self.name,
                "vid": vid,
                "key": self.described[vid],
                "spelling": None,
                "phase": phase,
                "seconds": seconds,
                "origin": origin,
                "site": (where.site if where is not None else None) or "before mlacheck",
                "stack": where.stack if where is not None else [],
            }
        )

    def dispatched(self, key: object, phase: str, where: Where) -> object:
        """A launch (or a lookup) of a variant in a phase: counted; the first of each (variant, phase) is an event.
        Returns the variant's counter of that phase."""
        vid = self.vid(key)
        counter = self.counts.dispatches(vid, phase)
        next(counter)
        if (vid, phase) not in self._first:
            self._first.add((vid, phase))
            self._write(
                {
                    "type": "dispatch",
                    "family": self.name,
                    "vid": vid,
                    "key": self.described[vid],
                    "spelling": None,
                    "phase": phase,
                    "site": where.site,
                    "stack": where.stack,
                    "call": {},
                }
            )
        return counter

    def forget_fast(self) -> None:
        for cache in self.caches.values():
            cache._fast.clear()

    def serving_started(self) -> None:
        """Serving starts now: what was counted as serving so far was warm-up."""
        self.flush()
        self.counts.serving_as_warmup()
        self.forget_fast()
        self._first = {first for first in self._first if first[1] != "serving"}
        self.flush()

    def after_fork(self) -> None:
        """In a forked child: a fresh trace; what the child inherited is listed, counts start at zero."""
        self.forget_fast()
        self.counts.restart()
        self._first.clear()
        self.family_event(0)
        cached = {key for cache in self.caches.values() for key in dict.keys(cache)}
        for key in self.vids:
            if key in cached:
                self.compiled(key, "inherited", None, "compile", None)

    def flush(self, final: bool = False) -> None:
        totals = self.counts.to_write(final)
        if totals is not None:
            self._write({"type": "counts", "family": self.name, **totals, "final": final})
