"""The trace: one event per line (JSONL), versioned; every event passes through one `EventSink.write`.
(`mlacheck.trace` reads traces back; this module is what an observed process imports, so it stays small.)

A trace grows with variants, not with dispatches: the first dispatch of each variant in each phase is
an event, written at once; later dispatches are counted in memory and written as `counts` (cumulative
totals) at a bounded interval and when the process exits, so a killed process still says "at least N".

Event types (every event has "type"; the first event of a trace is "run" and carries "format_version"):
- run:            {format_version, pid, mlacheck_version, started}; in program mode also host, ppid,
                  argv, rank (RANK, else LOCAL_RANK, else null), cute_dsl_arch, forked_from; trace_replaced where
                  the trace was deleted while the process ran (what it held is lost). A later run event in the same
                  trace starts a new image of the process (it exec'd): vids are per image
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
- lost:           {events, errors: {errno name: n}, t}   the trace refused that many events of this process so far
                  (cumulative; also in the note `<trace>.lost` where the trace could not take it)
- exec:           {path, argv, python, t[, failed]}   the process image is replaced (os.exec*): what follows in the
                  trace, from the next run event, is the new image's; failed: the exec did not happen, why
- exit:           {rank, how, t}      the process ended normally (rank from torch.distributed when it was
                                      initialized, else RANK / LOCAL_RANK at exit)
`t` (seconds since the run event, by time.time(): `run_clock`) is optional: a reader does without it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
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
        "lost",
        "exec",
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
    """Appends one JSON line per event with a single os.write, so a killed process loses at most that line.

    Nothing is lost in silence: every write's result is checked. An event the file refuses (a full disk, a file-size
    limit, an I/O error) is counted, and the count goes into the trace as a `lost` event with the next write that
    succeeds (and at `close`), and into a note beside the trace (`lost_note_path`) at once, where the trace cannot take
    it. The descriptor is checked to be the trace's before each write (device and inode, kept at open): one that the
    program closed or reused for a file of its own (`os.closerange`, daemonizing code) is never written into nor
    closed; the trace is opened again by its path. A trace deleted while open is made again, starting with `header`
    (the process's run event, marked `trace_replaced`). Files are opened without following links and closed at exec.
    """

    FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC

    def __init__(self, path: str | os.PathLike, header: dict | None = None) -> None:
        self._fd = -1
        self._identity: tuple[int, int] | None = None
        self.header = header  # written first into a trace made again after it was deleted
        self.lost = 0  # events the trace refused, in all
        self._reported = 0  # of them, how many a `lost` event in the trace already says
        self._errors: dict[str, int] = {}
        self._cut = False  # a refused write left part of a line: the next write ends it first
        self.reopen(path)

    def reopen(self, path: str | os.PathLike) -> None:
        """Write to another file from now on (a forked child gets its own trace); counts start again."""
        try:
            fd, identity = _open_regular(path, self.FLAGS)
        except OSError as exc:
            raise MlacheckError(f"{path}: cannot write the event trace: {exc}") from None
        self._release()
        self.path, self._fd, self._identity = path, fd, identity
        self.lost, self._reported, self._errors, self._cut = 0, 0, {}, False

    def write(self, event: dict) -> None:
        line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        if not self._still_ours() and not self._open_again():
            self._refused(line, OSError(errno.EBADF, "the trace could not be opened again"))
            return
        lost = self.lost
        data = b"\n" * self._cut + (self._lost_line(lost) if lost > self._reported else b"") + line
        try:
            self._write_all(data)
        except OSError as exc:
            self._refused(line, exc)
            return
        self._cut, self._reported = False, lost

    def close(self) -> None:
        """Say what was lost (in the trace, else in the note beside it), then close the trace if it is still ours."""
        if self.lost > self._reported and self._fd >= 0 and self._still_ours():
            try:
                self._write_all(b"\n" * self._cut + self._lost_line(self.lost))
                self._reported = self.lost
            except OSError:
                pass
        self._release()

    def _release(self) -> None:
        """Close the descriptor if it is still the trace's (never one the program took over)."""
        if self._fd >= 0 and self._still_ours():
            os.close(self._fd)
        self._fd, self._identity = -1, None

    def _still_ours(self) -> bool:
        """Whether the descriptor still is the trace opened (a closed or reused one is not), and the trace still in
        the folder (one deleted while open is not)."""
        try:
            info = os.fstat(self._fd)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self._identity and info.st_nlink > 0

    def _open_again(self) -> bool:
        """Open the trace again by its path (the descriptor was taken from it); never closes the old number."""
        try:
            fd, identity = _open_regular(self.path, self.FLAGS)
        except OSError:
            return False
        self._fd, self._identity = fd, identity
        if os.fstat(fd).st_size == 0 and self.header is not None:
            try:
                self._write_all((json.dumps({**self.header, "trace_replaced": True}) + "\n").encode())
            except OSError:
                return True
        return True

    def _write_all(self, data: bytes) -> None:
        """Write every byte, or raise; a short write (the disk filled up) is followed by the rest."""
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            if written <= 0:
                raise OSError(errno.EIO, "the trace took no bytes")
            self._cut = True
            view = view[written:]

    def _refused(self, line: bytes, error: OSError) -> None:
        """Count an event the trace refused, and say so in the note beside the trace at once."""
        self.lost += 1
        name = errno.errorcode.get(error.errno or 0, "error")
        self._errors[name] = self._errors.get(name, 0) + 1
        if self.lost == 1:
            try:
                sys.stderr.write(f"mlacheck: pid {os.getpid()} lost an event of its trace {self.path}: {error}\n")
            except Exception:  # noqa: BLE001 - the program's stderr may be closed too
                pass
        _write_note(lost_note_path(self.path), self._note_text())

    def _lost_line(self, count: int) -> bytes:
        event = {"type": "lost", "events": count, "errors": dict(self._errors), "t": run_clock()}
        return (json.dumps(event, separators=(",", ":")) + "\n").encode()

    def _note_text(self) -> str:
        errors = ", ".join(f"{name} x{count}" for name, count in sorted(self._errors.items()))
        return f"{self.lost} event(s) lost ({errors})\n"


def lost_note_path(trace: str | os.PathLike) -> str:
    """The note beside a trace that says how many events the trace refused, where the trace cannot say it."""
    return f"{os.fspath(trace)}.lost"


def _open_regular(path: str | os.PathLike, flags: int, mode: int = 0o600) -> tuple[int, tuple[int, int]]:
    """Open `path` (never through a link); only a regular file of this user's will do. (fd, (device, inode))."""
    fd = os.open(path, flags | os.O_NONBLOCK, mode)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or (hasattr(os, "getuid") and info.st_uid != os.getuid()):
        os.close(fd)
        raise OSError(errno.EPERM, "not a regular file of this user's")
    return fd, (info.st_dev, info.st_ino)


def _write_note(path: str, text: str) -> None:
    """Write a note of this process's (best effort: the disk may be full too)."""
    try:
        fd, _ = _open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.ftruncate(fd, 0)
        os.write(fd, text.encode())
    except OSError:
        pass
    finally:
        os.close(fd)


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
