"""The trace: one event per line (JSONL), versioned; every event passes through one `EventSink.write`.
(`mlacheck.trace` reads traces back; this module is what an observed process imports, so it stays small.)

A trace grows with variants, not with dispatches: the first dispatch of each variant in each phase is
an event, written at once; later dispatches are counted in memory and written as `counts` (cumulative
totals) at a bounded interval and when the process exits, so a killed process still says "at least N".

Event types (every event has "type"; the first event of a trace is "run" and carries "format_version"):
- run:            {format_version, pid, mlacheck_version, started}; in program mode also host, ppid,
                  argv, rank (RANK, else LOCAL_RANK, else null), cute_dsl_arch, forked_from
- family:         {family, distribution, version, key_fields, cache_kind, fingerprint, preexisting}
                  a family's hooks were installed (preexisting: entries already in the cache then,
                  as a count where the interpreter cannot list them); a family found at run time (a
                  Triton kernel) adds kernel (MODULE:QUALNAME) and every_lookup_counted (every lookup of
                  its cache is counted: a variant with none was not used); written again if that changes
- compile:        {family, vid, key, spelling, phase, seconds, origin, site, stack, t}
                  a variant entered the cache, t seconds (wall clock) after the process's run event. vid numbers the cache's own key in this process; key is
                  {field: typed value}; spelling is how a functools-cached call spelled its key (null for
                  a dict key); phase is warmup | capture | serving | preexisting | inherited; origin is
                  compile | skip | unknown (not made by a watched compile)
- dispatch:       {family, vid, key, spelling, phase, site, stack, call}   the first lookup of vid in that phase;
                  call holds the rule's call_facts (locals of that dispatch call, e.g. its batch size)
- counts:         {family, dispatches: {"vid:phase": n}, calls: {function: n}, final}   cumulative totals (a
                  functools family counts a dispatch where it launches what it looked up)
- dispatch_error: {family, function, error, message, reached_lookup, site}   first of each kind; how many
                  are in counts.calls as "function!before" / "function!after"
- no_lookup:      {family, function, site}   first dispatch call that returned without a lookup, where the
                  rule says every call looks up; how many are in counts.calls as "function!nolookup"
- serving_start:  {how, site, t}      serving starts here: earlier compiles and dispatches are warm-up
- context:        {values: {name: value}}   what the process itself showed (e.g. target_arch, engine)
- numerics:       {family, key, kernel}   a launched kernel's output against the reference (execute mode)
- unwatched:      {module, cache, families, provider, reasons}   the process imported a cache that no loaded rule
                  describes as installed (a fork, an unchecked release): it is not watched
- unwatched_dispatch: {module, function, site}   the first call of such a cache's dispatch function
- unwatched_compile: {net, kernel, key, seconds, phase, site, stack}   a compile through a compile net that no
                  watched family accounted for; phase is warmup | capture | serving | unmarked (no serving start
                  marked in the process, and no warm-up or capture frame)
- unseen:         {family, what}   something of a watched family capture could not see (an insert that bypassed
                  the recording cache, a fingerprint it could not compute, a rebound cache or dispatch, a dispatch
                  function the installed code lacks): what went through there is missing, so the run cannot pass
- internal_error: {where, message}    capture failed; the program went on
- exit:           {rank, how, t}      the process ended normally (rank from torch.distributed when it was
                                      initialized, else RANK / LOCAL_RANK at exit)
`t` (seconds since the run event, by time.time(): `run_clock`) is optional: a reader does without it.
"""

from __future__ import annotations

import json
import os
import time

from mlacheck.errors import MlacheckError

_run_started = time.time()  # this process's run event; a forked child's new run event restarts it


def start_run_clock() -> float:
    """Mark this process's run event now (its `started`); `run_clock` counts from here."""
    global _run_started
    _run_started = time.time()
    return _run_started


def run_clock() -> float:
    """Seconds since this process's run event, by the wall clock (an event's `t`), to the millisecond."""
    return round(time.time() - _run_started, 3)


FORMAT_VERSION = 2
"""The trace's format (`trace.py` reads 1 and 2). 1: one event per dispatch, keys as lists of strings. 2: typed keys,
the first dispatch per variant and phase plus cumulative `counts`, processes and phases. Within 2 (mlacheck 0.3):
`numerics` events no longer carry the scenario's tokens and fp8_cost (readers never needed them); new event types
unwatched, unwatched_dispatch and unwatched_compile (a reader of 0.2 counts them as unreadable lines). Within 2 (the
HTML report's timeline): `compile`, `serving_start` and `exit` events may carry `t`, seconds since the process's
run event; an optional field that every reader does without, so the format stays 2."""
EVENT_TYPES = frozenset(
    {
        "run",
        "family",
        "compile",
        "dispatch",
        "counts",
        "dispatch_error",
        "no_lookup",
        "serving_start",
        "context",
        "numerics",
        "internal_error",
        "unseen",
        "exit",
        "unwatched",
        "unwatched_dispatch",
        "unwatched_compile",
    }
)


class EventSink:
    """Where events go: `write(event)` one at a time, `close()` at the end."""

    def write(self, event: dict) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class MemorySink(EventSink):
    """Keeps events in a list (the scenario analyses them in the same process)."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def write(self, event: dict) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass


class JsonlSink(EventSink):
    """Appends one JSON line per event with a single os.write, so a killed process loses at most that line."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._fd = -1
        self.reopen(path)

    def reopen(self, path: str | os.PathLike) -> None:
        """Write to another file from now on (a forked child gets its own trace)."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise MlacheckError(f"{path}: cannot write the event trace: {exc}") from None
        self.close()
        self.path, self._fd = path, fd

    def write(self, event: dict) -> None:
        os.write(self._fd, (json.dumps(event, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class CallbackSink(EventSink):
    """Hands every event to a callback (a progress display); a callback that raises loses nothing but itself."""

    def __init__(self, callback) -> None:
        self.callback = callback

    def write(self, event: dict) -> None:
        try:
            self.callback(event)
        except Exception:  # noqa: BLE001 - a display must never cost the run an event
            pass


class TeeSink(EventSink):
    """Writes every event to several sinks."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = sinks

    def write(self, event: dict) -> None:
        for sink in self.sinks:
            sink.write(event)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
