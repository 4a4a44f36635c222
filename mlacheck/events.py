"""The trace: one event per line (JSONL), versioned; every event passes through one `EventSink.write`.

A trace grows with variants, not with dispatches: the first dispatch of each variant in each phase is
an event, written at once; later dispatches are counted in memory and written as `counts` (cumulative
totals) at a bounded interval and when the process exits, so a killed process still says "at least N".

Event types (every event has "type"; the first event of a trace is "run" and carries "format_version"):
- run:            {format_version, pid, mlacheck_version, started}; in program mode also host, ppid,
                  argv, rank (RANK, else LOCAL_RANK, else null), cute_dsl_arch, forked_from
- family:         {family, distribution, version, key_fields, cache_kind, fingerprint, preexisting}
                  a family's hooks were installed (preexisting: entries already in the cache then,
                  as a count where the interpreter cannot list them)
- compile:        {family, vid, key, spelling, phase, seconds, origin, site, stack}
                  a variant entered the cache. vid numbers the cache's own key in this process; key is
                  {field: typed value}; spelling is how a functools-cached call spelled its key (null for
                  a dict key); phase is warmup | capture | serving | preexisting | inherited; origin is
                  compile | skip | unknown (not made by a watched compile)
- dispatch:       {family, vid, key, spelling, phase, site, stack, call}   the first lookup of vid in that phase;
                  call holds the rule's call_facts (locals of that dispatch call, e.g. its batch size)
- counts:         {family, dispatches: {"vid:phase": n}, calls: {function: n}, final}   cumulative totals
- dispatch_error: {family, function, error, message, reached_lookup, site}   first of each kind; how many
                  are in counts.calls as "function!before" / "function!after"
- serving_start:  {how, site}         serving starts here: earlier compiles and dispatches are warm-up
- context:        {values: {name: value}}   what the process itself showed (e.g. target_arch, engine)
- numerics:       {family, key, tokens, fp8_cost, kernel}   one scenario call's accuracy (GPU modes)
- internal_error: {where, message}    capture failed; the program went on
- exit:           {rank, how}         the process ended normally (rank from torch.distributed when it was
                                      initialized, else RANK / LOCAL_RANK at exit)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mlacheck.errors import MlacheckError

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
EVENT_TYPES = frozenset({"run", "family", "compile", "dispatch", "counts", "dispatch_error", "serving_start",
                         "context", "numerics", "internal_error", "exit"})


class EventSink(Protocol):
    def write(self, event: dict) -> None: ...

    def close(self) -> None: ...


class MemorySink:
    """Keeps events in a list (the scenario analyses them in the same process)."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def write(self, event: dict) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass


class JsonlSink:
    """Appends one JSON line per event with a single os.write, so a killed process loses at most that line."""

    def __init__(self, path: Path) -> None:
        self._fd = -1
        self.reopen(path)

    def reopen(self, path: Path) -> None:
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


class TeeSink:
    """Writes every event to several sinks."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = sinks

    def write(self, event: dict) -> None:
        for sink in self.sinks:
            sink.write(event)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


@dataclass
class Trace:
    """One trace file read back: its events (format 2), whether its last line was cut short, bad lines."""

    events: list[dict]
    truncated: bool = False
    bad_lines: list[str] = field(default_factory=list)
    format_version: int = FORMAT_VERSION


def read_trace(path: Path) -> Trace:
    """Read a trace; a garbage line loses that line only (named in `bad_lines`), a cut-short last line is `truncated`."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise MlacheckError(f"{path}: cannot read the trace: {exc}") from None
    lines = text.split("\n")
    trace = Trace([], truncated=lines[-1] != "")
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        event = _parse(line)
        if event is not None:
            trace.events.append(event)
        elif number == len(lines):
            pass  # the line a killed writer was writing
        else:
            trace.bad_lines.append(f"{path}:{number}")
    if trace.truncated and trace.events and _parse(lines[-1]) is not None:
        trace.truncated = False
    if trace.events:
        first = trace.events[0]
        version = first.get("format_version") if first.get("type") == "run" else None
        if version not in READABLE_VERSIONS:
            raise MlacheckError(f"{path}: not an mlacheck trace of format {' or '.join(map(str, READABLE_VERSIONS))}; "
                                "re-record it with this mlacheck version")
        trace.format_version = version
        if version == 1:
            trace.events = upgrade_format_1(trace.events)
    return trace


def _parse(line: str) -> dict | None:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) and event.get("type") in EVENT_TYPES else None


def upgrade_format_1(events: list[dict]) -> list[dict]:
    """Format-1 events (keys as lists of strings, one event per dispatch) as format 2."""
    fields: dict[str, list[str]] = {}
    vids: dict[tuple, int] = {}
    seen: set[tuple] = set()
    counts: dict[str, dict[str, int]] = {}
    upgraded = []
    for event in events:
        kind = event["type"]
        if kind == "family":
            fields[event["family"]] = list(event.get("key_fields") or [])
            upgraded.append({**event, "cache_kind": "dict", "fingerprint": None, "preexisting": 0})
        elif kind in ("compile", "dispatch"):
            family, strings = event["family"], tuple(event.get("key") or [])
            vid = vids.setdefault((family, strings), len(vids))
            names = fields.get(family, [])
            key = {(names[i] if i < len(names) else f"field{i}"): _guess(text) for i, text in enumerate(strings)}
            if kind == "compile":
                phase = "serving" if event.get("phase") == "dispatch" else "warmup"
                upgraded.append({"type": "compile", "family": family, "vid": vid, "key": key, "spelling": None,
                                 "phase": phase, "seconds": event.get("seconds"), "origin": "compile",
                                 "site": event.get("site"), "stack": []})
            else:
                tally = counts.setdefault(family, {})
                tally[f"{vid}:serving"] = tally.get(f"{vid}:serving", 0) + 1
                if (family, vid) not in seen:
                    seen.add((family, vid))
                    upgraded.append({"type": "dispatch", "family": family, "vid": vid, "key": key, "spelling": None,
                                     "phase": "serving", "site": None, "stack": []})
        elif kind == "numerics":
            names = fields.get(event["family"], [])
            key = {(names[i] if i < len(names) else f"field{i}"): _guess(t) for i, t in enumerate(event.get("key") or [])}
            upgraded.append({**event, "key": key})
        else:
            upgraded.append(event)
    at = next((i for i, e in enumerate(upgraded) if e["type"] == "exit"), len(upgraded))
    exited = at < len(upgraded)
    upgraded[at:at] = [{"type": "counts", "family": family, "dispatches": tally, "calls": {}, "final": exited}
                       for family, tally in counts.items()]
    return upgraded


def _guess(text: str) -> object:
    """A format-1 key string back as a typed value (only format 1 needs this)."""
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    try:
        return int(text)
    except ValueError:
        return text
