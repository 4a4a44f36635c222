"""One Triton kernel as a kernel family in one process: its variants, counts and events; and the dicts that count
its cache hits.

Each `@triton.jit` kernel that compiles or launches is a family of its own, `<triton>:<module>.<qualname>` (`<triton>`:
the import name of the Triton that compiled it: `triton`, `tokenspeed_triton`), keyed by its parameters as Triton
specialized them (`keys.describe`); an `@triton.autotune` kernel's tuning cache is another,
`<triton>:<module>.<qualname>:autotune`, keyed by its tuning key. A family writes the same events as a rule file's
family, through the same ledger (`ledger.Ledger`): `family` once, `compile` when a variant enters the cache, `dispatch`
at the first lookup of a variant in each phase, the counts when flushed.

Hits are counted where Triton looks its caches up: a kernel's `kernel_cache.get(key)` in `JITFunction.run`, an
autotuner's `key not in self.cache` in `Autotuner.run`. The dicts below stand in for those caches; a variant seen
in serving is served from the dict's fast table (a counter step), every other lookup reaches the capture, which
reads the stack. Every lookup of a counting dict is counted, so a warm-up variant that no launch hit is dead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from mlacheck.capture import hotpath
from mlacheck.capture.caches.retiring import RetiringDict
from mlacheck.capture.hotpath import FLUSH_EVERY
from mlacheck.capture.ledger import Ledger
from mlacheck.capture.stack import Where
from mlacheck.sinks import EventSink

_getframe = sys._getframe


class CountingCache(RetiringDict, hotpath.GetDict):
    """A kernel's `kernel_cache` on one device (the first item of `JITFunction.device_caches[device]`): a dict whose
    `get` of a cached key, `JITFunction.run`'s only lookup, is a counted hit (`hotpath.GetDict`: a variant seen in
    serving is served from the fast table, (counter, kernel), without a Python frame where the hot path is
    compiled). A write to a key takes the key out of the fast table (`RetiringDict`)."""

    __slots__ = ("_owner",)

    def _missed(self, key: object, frame: object) -> object:
        return self._capture.looked_up(self, key, None, frame)


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
    """One kernel (or one autotuner) of one process: its ledger, and the counting dicts of its caches."""

    def __init__(
        self,
        name: str,
        kernel: str,
        key_fields: list[str],
        describe: Callable[[object], dict],
        sink: EventSink,
        distribution: str,
        version: str | None,
        flush_seconds: float,
        serving: bool,
    ) -> None:
        self.name, self.kernel, self.key_fields = name, kernel, key_fields
        self.distribution, self.version = distribution, version
        self.ledger = Ledger(name, sink, lambda key: (describe(key), None), flush_seconds, serving)
        self.caches: dict[int, dict] = {}  # id -> the counting dicts of its caches (their fast tables)
        self.every_lookup_counted = True

    def family_event(self, preexisting: int) -> None:
        self.ledger.announce(
            preexisting,
            distribution=self.distribution,
            version=self.version,
            providers=[],
            key_fields=list(self.key_fields),
            cache_kind="triton",
            fingerprint=None,
            kernel=self.kernel,
            every_lookup_counted=self.every_lookup_counted,
        )

    def compiled(
        self,
        key: object,
        phase: str,
        seconds: float | None,
        origin: str,
        where: Where | None,
        start: int | None = None,
    ) -> None:
        """A variant entered the cache (`start`: the id of the compile that made it, which returned)."""
        site, stack = (where.site, where.stack) if where is not None else (None, [])
        self.ledger.compiled(self.ledger.vid(key), phase, seconds, origin, site, stack, start)

    def dispatched(self, key: object, phase: str, where: Where) -> object:
        """A launch (or a lookup) of a variant in a phase: counted; the first of each (variant, phase) is an event.
        Returns the variant's counter of that phase."""
        return self.ledger.dispatched(self.ledger.vid(key), phase, where.site, where.stack)

    def forget_fast(self) -> None:
        for cache in self.caches.values():
            cache._fast.clear()

    def serving_started(self) -> None:
        """Serving starts now: what was counted as serving so far was warm-up."""
        self.ledger.serving_started()
        self.forget_fast()

    def after_fork(self) -> None:
        """In a forked child: a fresh trace; what the child inherited is listed, counts start at zero."""
        self.forget_fast()
        cached = {key for cache in self.caches.values() for key in dict.keys(cache)}
        self.ledger.after_fork(vid for key, vid in self.ledger.vids.items() if key in cached)
