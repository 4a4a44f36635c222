"""A kernel family's ledger in one process: the bookkeeping every capture path shares (a rule file's `FamilyCapture`,
each Triton kernel's `KernelFamily`), and the one place their events are written.

Each cache key the process uses gets a variant number (vid) and is described once (its fields by name, typed, and how
a functools call spelled it). The first time a variant enters the cache, and the first time it is looked up in each
phase, an event is written at once; every other lookup only steps a counter (`Counts`), and the counts are kept as
state at a bounded interval (`EventSink.checkpoint`) and written as a final `counts` event at exit. Each flush first
writes what its owner's `audit` says went past capture since the last one (an `unseen` event each: an insert past the
recording cache, a rebound attribute, a module imported again). Phases are the one phase model's (`phase.decide`). A
failure becomes an `internal_error` event (`sinks.write_internal_error`, whose one fallback is stderr), never an
exception in the program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from mlacheck import events, sinks
from mlacheck.capture import phase
from mlacheck.capture.counts import Counts
from mlacheck.keys import typed
from mlacheck.sinks import EventSink

NO_KEY = object()
"""A compile whose key is not known yet (its cache lookup comes after it)."""

Describe = Callable[[object], tuple[dict[str, object], dict | None]]
"""A cache key -> its fields by name (raw values) and how the call spelled it (None where the kind has no spelling)."""

Audit = Callable[[bool], list[str]]
"""Whether the flush is the final one -> what went past capture since the last flush, one line each, each said once."""


class Ledger:
    """One family's variants, counts and events in one process."""

    def __init__(
        self,
        name: str,
        sink: EventSink,
        describe: Describe,
        flush_seconds: float = 5.0,
        serving: bool = False,
        audit: Audit | None = None,
    ) -> None:
        self.name, self.sink, self.flush_seconds = name, sink, flush_seconds
        self.serving = serving  # the process marked serving start
        self.audit = audit
        self.vids: dict[object, int] = {}
        self.described: list[tuple[dict, dict | None]] = []  # by vid: (typed key, spelling)
        self.counts = Counts()
        self._describe = describe
        self._first: set[tuple[int, str]] = set()  # (vid, phase) of the dispatch events written
        self._family: dict = {}  # the family event's fields but preexisting (a forked child writes it again)

    # -- variants -----------------------------------------------------------------------------------------
    def vid(self, key: object) -> int:
        """The variant number of a cache key (described at its first use)."""
        vid = self.vids.get(key)
        if vid is None:
            fields, spelling = self._describe(key)
            vid = self.vids[key] = len(self.described)
            self.described.append(({name: typed(value) for name, value in fields.items()}, spelling))
        return vid

    def phase(self, frame: str | None, in_dispatch: bool | None) -> str:
        """A compile's or dispatch's phase now (`phase.decide`, with whether this process marked serving start)."""
        return phase.decide(frame, self.serving, in_dispatch)

    # -- events -------------------------------------------------------------------------------------------
    def announce(self, preexisting: int, **fields: object) -> None:
        """Write the family event (`fields`: all of `events.family_event`'s but family and preexisting). A sink that
        fails here raises: an install that cannot say so is undone."""
        self._family = fields
        self.sink.write(events.family_event(self.name, preexisting=preexisting, **fields))

    def announce_again(self, preexisting: int) -> None:
        """Write the family event again, as announced (the module ran again, a forked child's trace starts)."""
        self.write(events.family_event(self.name, preexisting=preexisting, **self._family))

    def unseen(self, what: str) -> None:
        """Something of the family capture could not see (one line): the run cannot pass."""
        self.write(events.unseen_event(self.name, what))

    def compiled(
        self,
        vid: int,
        phase: str,
        seconds: float | None,
        origin: str,
        site: str | None,
        stack: list[str],
        start: int | None = None,
        **cache,
    ) -> None:
        """A variant entered the cache (`start`: the id of the watched compile that made it, which returned; `cache`: a
        disk cache's entries and foreign entries, `events.compile_event`)."""
        key, spelling = self.described[vid]
        event = events.compile_event(
            self.name, vid, key, spelling, phase, seconds, origin, site, stack, start=start, **cache
        )
        self.write(event)

    def compile_began(self, phase: str, site: str | None, stack: list[str], key: object = NO_KEY) -> int | None:
        """A compile begins (`key`: the cache key where it is known already): its `compile_start` event, written
        before the compile runs; returns its id for `compile_ended` (None where the event was lost)."""
        vid = None if key is NO_KEY else self.vid(key)
        described, spelling = self.described[vid] if vid is not None else (None, None)
        event = events.compile_start_event(phase, site, stack, self.name, vid, described, spelling)
        try:
            self.sink.write(event)
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            self.internal_error("write", exc)
            return None
        return event["id"]

    def compile_ended(self, start: int | None, seconds: float | None, outcome: str) -> None:
        """The compile `compile_began` said began ended (outcome: returned, raised or skipped). A returned one's end goes
        to the sink's `end`: its record, named by `start`, may say it (`EventSink.end`)."""
        if start is not None:
            self.write(events.compile_end_event(start, seconds, outcome), held=outcome == "returned")

    def dispatched(
        self, vid: int, phase: str, site: str | None, stack: list[str], call: dict | None = None, count: bool = True
    ) -> object:
        """A dispatch of a variant in a phase: counted (unless `count` is False: what follows counts it); the first of
        each (variant, phase) is an event. Returns the variant's counter of that phase."""
        counter = self.counts.dispatches(vid, phase)
        if count:
            next(counter)
        if (vid, phase) not in self._first:
            self._first.add((vid, phase))
            key, spelling = self.described[vid]
            self.write(events.dispatch_event(self.name, vid, key, spelling, phase, site, stack, call or {}))
        return counter

    def write(self, event: dict, held: bool = False) -> None:
        """Write one event (`held`: a returned compile's end, to the sink's `end`); a sink that fails loses the event
        (an internal error), never what the program does next."""
        try:
            (self.sink.end if held else self.sink.write)(event)
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            self.internal_error("write", exc)

    def internal_error(self, where: str, error: object) -> None:
        """What capture could not see or do (the run then cannot pass); never raises."""
        sinks.write_internal_error(self.sink, f"{self.name}: {where}", error)

    def safely(self, where: str, action: Callable[[], object]) -> None:
        """Run a capture action; a failure becomes an internal error, never an exception in the program."""
        try:
            action()
        except Exception as exc:  # noqa: BLE001
            self.internal_error(where, exc)

    # -- the process's moments ----------------------------------------------------------------------------
    def serving_started(self) -> None:
        """Serving starts now: what this process counted as serving so far was warm-up, and from now on every compile
        is serving (`phase`). (Its owner forgets its fast tables.)"""
        self.serving = True
        self.counts.serving_as_warmup()
        self._first = {first for first in self._first if first[1] != phase.SERVING}
        self.flush()

    def after_fork(self, inherited: Iterable[int]) -> None:
        """In a forked child: a fresh trace starts; the variants the child inherited (`inherited` vids) are listed,
        counts start at zero. (Its owner forgets its fast tables.)"""
        self.counts.restart()
        self._first.clear()
        self.announce_again(0)
        for vid in inherited:
            self.compiled(vid, "inherited", None, "compile", None, [])

    # -- counts -------------------------------------------------------------------------------------------
    def maybe_flush(self) -> None:
        """Flush when the interval has passed since the last flush."""
        if self.counts.due(self.flush_seconds):
            self.safely("flush", self.flush)

    def flush(self, final: bool = False) -> None:
        """Keep the counts (when they changed): as state while the process runs, as a `counts` event finally."""
        flush([self], final)


def flush(ledgers: Iterable[Ledger], final: bool = False) -> None:
    """Keep the counts of several families of one sink at once, each after what its audit says went past capture (an
    `unseen` event each): finally as a `counts` event each in the trace, else as one checkpoint of the state that
    changed (`EventSink.checkpoint`: replaced, never appended)."""
    changed: dict[str, dict] = {}
    sink = None
    for ledger in ledgers:
        if ledger.audit is not None:
            for what in ledger.audit(final):
                ledger.unseen(what)
        totals = ledger.counts.to_write(final)
        if totals is None:
            continue
        sink = ledger.sink
        if final:
            ledger.write(events.counts_event(ledger.name, **totals, final=True))
        else:
            changed[ledger.name] = totals
    if changed and sink is not None:
        sink.checkpoint(changed)
