"""The trace: one event per line (JSONL), versioned. Every event is made by one constructor per kind below (nothing
else in mlacheck builds one), and every event passes through one `EventSink.write` (`mlacheck.sinks`). Each kind's
fields are given by its JSON Schema, `mlacheck/schemas/events/KIND.json` (shipped with the package; a test validates
what representative runs write against them). `mlacheck.trace` reads traces back; this module is what an observed
process imports, so it stays small.

A trace grows with variants, not with dispatches or time: the first dispatch of each variant in each phase is an
event, written at once; later dispatches are counted in memory, kept as state (`EventSink.checkpoint`: a file beside
the trace, replaced) at a bounded interval, and written as a final `counts` event when the process exits, so a
killed process still says "at least N".

The kinds (every event has "type"; the first event of a trace is "run" and carries "format_version"):
- run: this process started (pid, mlacheck_version, started; program mode adds ppid, host, argv, rank,
  target_arch, forked_from, found_by, start_ticks (its start in clock ticks after boot: with its pid, the process's
  identity); trace_replaced where the trace was deleted while the process ran and made again,
  what it held being lost). A later run event in the same trace starts a new image of the process (it exec'd): vids
  are per image
- family: a family's hooks were installed (a Triton kernel, found at run time, adds kernel and every_lookup_counted)
- compile_start / compile_end: a compile begins / ends (id pairs them; one with no end is a compile the process
  died in, or was still in when it exited)
- compile: a variant entered the cache (phase: warmup | capture | serving | unknown | preexisting | inherited); the
  record of a watched compile that returned names its compile_start (`start`), and where the trace's next line after
  the compile returned is that record, the record is its end too: no compile_end is written (`sinks.JsonlSink.end`)
- dispatch: the first lookup of a variant in a phase
- counts: a family's cumulative dispatches per "vid:phase" and calls per function (final: at exit)
- dispatch_error / no_lookup: the first dispatch call of a kind that raised, or returned without a lookup
- serving_start: serving starts here (`mlacheck.capture.phase`)
- slow_step: a call of an engine's step function far slower than the process's usual step (`program/steps.py`)
- context: what the process itself showed (target_arch, engine)
- numerics: a launched kernel's output against the reference (execute mode)
- unwatched / unwatched_dispatch: a cache no loaded rule describes, and the first call of its dispatch function
- unwatched_compile: a compile through a compile net that no watched family accounted for (one that raised too), or a
  compiler process started outside every compile (`child`: its pid; its seconds come from the reap of it)
- unseen: something of a watched family capture could not see (an insert past the recording cache, a fingerprint it
  could not compute, a rebound cache or dispatch function): what went through there is missing, so the run cannot pass
- internal_error: capture failed; the program went on
- lost: the trace refused that many events of this process so far (also said in the note `<trace>.lost`)
- exec: the process image is replaced (os.exec*): what follows, from the next run event, is the new image's
- spawn: the process started a child by a fork and exec it cannot observe from Python (subprocess, multiprocessing's
  spawn, os.posix_spawn): its pid, what it runs, whether that is Python, its rank
- kill: the process sent a signal to another process (`target`: its pid) or group (`target`: minus its pgid; -1 for
  every process it may signal): how an engine ends its workers; a SIGKILL's names the processes it reached (`reached`:
  pid and start of each, read just before it was sent). Written once sent (one that raised is not written)
- reaped: the process reaped a child (`pid`), which ended by `how` ("exit", its status; "signal", the signal's number)
- exit: the process ended normally
`t` (seconds since the run event, by time.time(): `run_clock`) is optional: a reader does without it.
"""

from __future__ import annotations

import itertools
import os
import time

from mlacheck import __version__, schemas

_run_started = time.time()  # this process's run event; a forked child's new run event restarts it


def start_run_clock() -> float:
    """Mark this process's run event now (its `started`); `run_clock` counts from here."""
    global _run_started
    _run_started = time.time()
    return _run_started


def run_started() -> float:
    """When this process's run event was (`start_run_clock`): the start of the process's image."""
    return _run_started


def run_clock() -> float:
    """Seconds since this process's run event, by the wall clock (an event's `t`), to the millisecond."""
    return round(time.time() - _run_started, 3)


FORMAT_VERSION = schemas.FORMATS["trace"].current
"""The trace's format (`schemas.FORMATS["trace"]` says what changed in each; `trace.py` reads them). Within 2
(mlacheck 0.3): `numerics` events no longer carry the scenario's tokens and fp8_cost; new event types unwatched,
unwatched_dispatch and unwatched_compile (a reader of 0.2 counts them as unreadable lines); `compile`,
`serving_start` and `exit` events may carry `t`, an optional field that every reader does without."""

PROGRAM_RUN_FIELDS = (
    "ppid",
    "host",
    "pgid",
    "argv",
    "rank",
    "target_arch",
    "forked_from",
    "found_by",
    "trace_replaced",
    "start_ticks",
)


def run_event(pid: int, started: float, **program: object) -> dict:
    """This process started (`started`: `start_run_clock()`); program mode adds PROGRAM_RUN_FIELDS."""
    unknown = set(program) - set(PROGRAM_RUN_FIELDS)
    if unknown:
        raise TypeError(f"run_event: unknown fields {sorted(unknown)}")
    return {
        "type": "run",
        "format_version": FORMAT_VERSION,
        "pid": pid,
        "mlacheck_version": __version__,
        "started": started,
        **program,
    }


def family_event(
    family: str,
    distribution: str,
    version: str | None,
    providers: list[str],
    key_fields: list[str],
    cache_kind: str,
    fingerprint: str | None,
    preexisting: int,
    **found: object,
) -> dict:
    """A family's hooks were installed (preexisting: entries already in the cache then, as a count where they cannot
    be listed); a family found at run time (a Triton kernel) adds kernel (MODULE:QUALNAME) and every_lookup_counted
    (every lookup of its cache is counted: a variant with none was not used)."""
    if set(found) - {"kernel", "every_lookup_counted"}:
        raise TypeError(f"family_event: unknown fields {sorted(found)}")
    return {
        "type": "family",
        "family": family,
        "distribution": distribution,
        "version": version,
        "providers": list(providers),
        "key_fields": list(key_fields),
        "cache_kind": cache_kind,
        "fingerprint": fingerprint,
        "preexisting": preexisting,
        **found,
    }


def compile_event(
    family: str,
    vid: int,
    key: dict,
    spelling: dict | None,
    phase: str,
    seconds: float | None,
    origin: str,
    site: str | None,
    stack: list[str],
    entries: list[str] | None = None,
    foreign: list[str] | None = None,
    start: int | None = None,
) -> dict:
    """A variant entered the cache, now. vid numbers the cache's own key in this process; key is {field: typed value};
    spelling is how a functools-cached call spelled its key (null for a dict key); origin is compile | skip | unknown
    (not made by a watched compile) | wait (a launch waited `seconds` for the variant's async compile, begun before it,
    to finish: Triton's AsyncCompileMode; the compile's own record precedes it); a variant there before install has site "before mlacheck". A disk cache's
    family (jit_dir) adds the `entries` the compile made, and the `foreign` entries its process found there since its
    last record that no call of its own made; a watched compile that returned, the id of its `compile_start`
    (`start`)."""
    cache = {
        name: value
        for name, value in (("entries", entries), ("foreign", foreign), ("start", start))
        if value is not None
    }
    return {
        "type": "compile",
        "family": family,
        "vid": vid,
        "key": key,
        "spelling": spelling,
        "phase": phase,
        "seconds": seconds,
        "origin": origin,
        "site": site or "before mlacheck",
        "stack": list(stack),
        "t": run_clock(),
    } | cache


_compile_ids = itertools.count()


def compile_start_event(
    phase: str,
    site: str | None,
    stack: list[str],
    family: str | None = None,
    vid: int | None = None,
    key: dict | None = None,
    spelling: dict | None = None,
    net: str | None = None,
    kernel: str | None = None,
) -> dict:
    """A compile begins, now, before it runs (a process that dies in it leaves this much): a watched family's (with
    the variant where the lookup's miss named it) or a compile net's (net, kernel). Each gets a new id (per process)."""
    event = {"type": "compile_start", "id": next(_compile_ids), "phase": phase, "site": site, "stack": list(stack)}
    if family is not None:
        event["family"] = family
        if vid is not None:
            event.update(vid=vid, key=key, spelling=spelling)
    else:
        event.update(net=net, kernel=kernel)
    event["t"] = run_clock()
    return event


def compile_end_event(start: int, seconds: float | None, outcome: str) -> dict:
    """The compile that `compile_start` `start` began ended, now: it returned (its `compile` or `unwatched_compile`
    event follows; a trace folds a family's into its `compile` record where that is its next line), raised, was
    skipped, or was cached (it made nothing: the library found the variant on disk)."""
    return {"type": "compile_end", "id": start, "seconds": seconds, "outcome": outcome, "t": run_clock()}


def dispatch_event(
    family: str,
    vid: int,
    key: dict,
    spelling: dict | None,
    phase: str,
    site: str | None,
    stack: list[str],
    call: dict,
) -> dict:
    """The first lookup of a variant in a phase; call holds the rule's call_facts (locals of that dispatch call)."""
    return {
        "type": "dispatch",
        "family": family,
        "vid": vid,
        "key": key,
        "spelling": spelling,
        "phase": phase,
        "site": site,
        "stack": list(stack),
        "call": call,
    }


def counts_event(family: str, dispatches: dict[str, int], calls: dict[str, int], final: bool) -> dict:
    """A family's cumulative totals: dispatches per "vid:phase" (a functools family counts a dispatch where it launches
    what it looked up), calls per dispatch function and per "function!before" / "!after" / "!nolookup"."""
    return {"type": "counts", "family": family, "dispatches": dispatches, "calls": calls, "final": final}


def dispatch_error_event(
    family: str, function: str, error: str, message: str, reached_lookup: bool, site: str | None
) -> dict:
    """The first dispatch call of a kind that raised, before its lookup or after it."""
    return {
        "type": "dispatch_error",
        "family": family,
        "function": function,
        "error": error,
        "message": message,
        "reached_lookup": reached_lookup,
        "site": site,
    }


def no_lookup_event(family: str, function: str, site: str | None) -> dict:
    """The first dispatch call that returned without a lookup, where the rule says every call looks up."""
    return {"type": "no_lookup", "family": family, "function": function, "site": site}


def serving_start_event(how: str, site: str | None) -> dict:
    """Serving starts here, now."""
    return {"type": "serving_start", "how": how, "site": site, "t": run_clock()}


def slow_step_event(function: str, seconds: float, usual: float, step: int, serving: bool, t: float) -> dict:
    """Step `step` of an engine's step function took `seconds`, far over the process's `usual` (the median of its
    recent steps); it began `t` seconds after the run event (a stall here, or a wait for another rank's)."""
    return {
        "type": "slow_step",
        "function": function,
        "seconds": round(seconds, 4),
        "usual": round(usual, 4),
        "step": step,
        "serving": serving,
        "t": round(t, 3),
    }


def context_event(values: dict[str, object]) -> dict:
    """What the process itself showed (target_arch, engine); a value that is None is left out."""
    return {"type": "context", "values": {name: value for name, value in values.items() if value is not None}}


def numerics_event(family: str, key: dict, kernel: dict) -> dict:
    """A launched kernel's output against the reference on the same inputs (execute mode)."""
    return {"type": "numerics", "family": family, "key": key, "kernel": kernel}


def internal_error_event(where: str, error: object) -> dict:
    """Capture failed at `where`; the program went on (the run then cannot pass)."""
    message = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    return {"type": "internal_error", "where": where, "message": message}


def unseen_event(family: str, what: str, net: bool = False) -> dict:
    """Something of a watched family that capture could not see (`what`, one line): the run cannot pass. `net`: what a
    compile net could not see (`family` names the net)."""
    return {"type": "unseen", "family": family, "what": what} | ({"net": True} if net else {})


def lost_event(events: int, errors: dict[str, int]) -> dict:
    """The trace refused `events` events of this process so far (cumulative within the image), by errno name."""
    return {"type": "lost", "events": events, "errors": dict(errors), "t": run_clock()}


def exec_event(
    path: str | None = None, argv: list[str] | None = None, python: bool | None = None, failed: str | None = None
) -> dict:
    """The process image is replaced now (os.exec*) by `path` (`python`: the new image runs a Python interpreter); with
    `failed` instead, an exec that did not happen (why): the same image goes on."""
    if failed is not None:
        return {"type": "exec", "failed": failed, "t": run_clock()}
    return {"type": "exec", "path": path, "argv": list(argv or []), "python": bool(python), "t": run_clock()}


def spawn_event(
    child: int, path: str, argv: list[str], python: bool, rank: int | None, start_ticks: int | None = None
) -> dict:
    """The process started `child` running `path` (`python`: a Python interpreter), with `rank` in its environment
    (`start_ticks`: the child's start, clock ticks after boot, where it could be read)."""
    started = {"start_ticks": start_ticks} if start_ticks is not None else {}
    return {
        "type": "spawn",
        "child": child,
        "path": path,
        "argv": argv,
        "python": python,
        "rank": rank,
        "t": run_clock(),
    } | started


def kill_event(target: int, signum: int, reached: tuple[tuple[int, int], ...] | None = None) -> dict:
    """The process sent signal `signum` to `target` (a pid; minus a pgid for a group, -1 for every process), which
    reached the processes `reached` ((pid, start in clock ticks after boot) of each)."""
    listed = {"reached": [list(process) for process in reached]} if reached is not None else {}
    return {"type": "kill", "target": target, "signal": signum, "t": run_clock()} | listed


def reaped_event(pid: int, how: str, number: int, start_ticks: int | None = None) -> dict:
    """The process reaped its child `pid`, which ended by `how`: "exit" with status `number`, or "signal" `number`;
    `start_ticks`: the child's start (clock ticks after boot), where it was read before the reap."""
    started = {"start_ticks": start_ticks} if start_ticks is not None else {}
    return {"type": "reaped", "pid": pid, "how": how, "number": number, "t": run_clock()} | started


def exit_event(rank: int | None, how: str) -> dict:
    """The process ended normally, now (rank from torch.distributed where it was initialized)."""
    return {"type": "exit", "rank": rank, "how": how, "t": run_clock()}


def unwatched_event(module: str, cache: str, families: list[str], provider: str, reasons: list[str]) -> dict:
    """The process imported a cache that no loaded rule describes as installed (a fork, an unchecked release)."""
    return {
        "type": "unwatched",
        "module": module,
        "cache": cache,
        "families": list(families),
        "provider": provider,
        "reasons": list(reasons),
    }


def unwatched_dispatch_event(module: str, function: str, site: str | None) -> dict:
    """The first call of an unwatched cache's dispatch function."""
    return {"type": "unwatched_dispatch", "module": module, "function": function, "site": site}


def unwatched_compile_event(
    net: str,
    kernel: str,
    key: dict,
    seconds: float | None,
    phase: str,
    site: str | None,
    stack: list[str],
    entries: list[str] | None = None,
    raised: str | None = None,
    child: int | None = None,
) -> dict:
    """A compile through a compile net that no watched family accounted for, now (`entries`: a disk cache family's
    net, the entries it made; `raised`: the type of the error the compile raised, where it did); or a compiler process
    started now (`child`: its pid; `seconds` None: the reap of it tells them)."""
    made = {"entries": entries} if entries is not None else {}
    made |= {"raised": raised} if raised is not None else {}
    made |= {"seconds": seconds} if seconds is not None else {}
    made |= {"child": child} if child is not None else {}
    return {
        "type": "unwatched_compile",
        "net": net,
        "kernel": kernel,
        "key": key,
        "phase": phase,
        "site": site,
        "stack": list(stack),
        "t": run_clock(),
    } | made


def checkpoint_path(trace: str | os.PathLike) -> str:
    """The counts checkpoint of a trace file: trace-PID.jsonl -> trace-PID.counts.json."""
    trace = os.fspath(trace)
    return (trace[: -len(".jsonl")] if trace.endswith(".jsonl") else trace) + ".counts.json"


def checkpoint_state(families: dict[str, dict]) -> dict:
    """What a counts checkpoint holds: each family's cumulative counts, when they were kept (`t`), and the image of the
    process they are of (`started`: its run event's; an exec starts a new image in the same trace)."""
    return schemas.stamp(
        "counts checkpoint", {"pid": os.getpid(), "started": _run_started, "t": run_clock(), "families": families}
    )


def lost_note_path(trace: str | os.PathLike) -> str:
    """The note beside a trace that says how many events the trace refused, where the trace cannot say it."""
    return f"{os.fspath(trace)}.lost"


EVENT_TYPES = frozenset(
    name.removesuffix("_event")
    for name, value in list(globals().items())
    if name.endswith("_event") and callable(value)
)
"""Every kind of event, one per constructor."""
