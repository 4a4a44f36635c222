"""The trace: one event per line (JSONL), versioned; every event passes through one `EventSink.write`.

Event types (every event has "type"; the first event of a trace is "run" and carries "format_version"):
- run:            {"type", "format_version", "pid", "mlacheck_version", "started"}; in program mode also
                  "host", "ppid", "argv", "rank" (RANK, else LOCAL_RANK, else null), "cute_dsl_arch"
- family:         {"type", "family", "version", "key_fields"}        a family's hooks were installed
- compile:        {"type", "family", "key", "phase", "seconds", "site"}  a variant entered the cache
                  (phase "precompile" outside any dispatch call, "dispatch" inside one)
- dispatch:       {"type", "family", "key"}                           a dispatch call looked a variant up
- numerics:       {"type", "family", "key", "tokens", "fp8_cost", "kernel"}  one prefill call's accuracy (GPU modes)
- internal_error: {"type", "where", "message"}                        capture failed; the program went on
- exit:           {"type", "rank"}                                    the process ended normally (rank from
                  torch.distributed when it was initialized, else from RANK / LOCAL_RANK at exit)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from mlacheck.errors import MlacheckError

FORMAT_VERSION = 1
EVENT_TYPES = frozenset({"run", "family", "compile", "dispatch", "numerics", "internal_error", "exit"})


class EventSink(Protocol):
    def write(self, event: dict) -> None: ...

    def write_cached(self, event: dict) -> None:
        """Write an event object that the caller reuses unchanged (a sink may cache its encoding)."""

    def close(self) -> None: ...


class MemorySink:
    """Keeps events in a list (the scenario run analyses them in the same process)."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def write(self, event: dict) -> None:
        self.events.append(event)

    write_cached = write

    def close(self) -> None:
        pass


class JsonlSink:
    """Appends one JSON line per event with a single os.write, so a killed process loses at most that line."""

    def __init__(self, path: Path) -> None:
        self._fd = -1
        self._encoded: dict[int, tuple[dict, bytes]] = {}
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
        os.write(self._fd, _encode(event))

    def write_cached(self, event: dict) -> None:
        cached = self._encoded.get(id(event))
        if cached is None or cached[0] is not event:
            cached = self._encoded[id(event)] = (event, _encode(event))
        os.write(self._fd, cached[1])

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

    def write_cached(self, event: dict) -> None:
        for sink in self.sinks:
            sink.write_cached(event)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def _encode(event: dict) -> bytes:
    return (json.dumps(event, separators=(",", ":")) + "\n").encode()


def read_trace(path: Path) -> tuple[list[dict], bool]:
    """Events of a trace file and whether its last line was cut short (a killed writer)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MlacheckError(f"{path}: cannot read the trace: {exc}") from None
    lines = text.split("\n")
    truncated = lines[-1] != ""
    events = []
    for number, line in enumerate(lines[:-1], start=1):
        events.append(_parse(path, number, line))
    if truncated:
        try:
            events.append(_parse(path, len(lines), lines[-1]))
            truncated = False
        except MlacheckError:
            pass
    if events and (events[0].get("type") != "run" or events[0].get("format_version") != FORMAT_VERSION):
        raise MlacheckError(
            f"{path}: not an mlacheck trace of format {FORMAT_VERSION}; re-record it with this mlacheck version"
        )
    return events, truncated


def _parse(path: Path, number: int, line: str) -> dict:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        event = None
    if not isinstance(event, dict) or event.get("type") not in EVENT_TYPES:
        raise MlacheckError(f"{path}:{number}: corrupt trace line; the file was edited or written by something else")
    return event
