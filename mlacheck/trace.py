"""Reading traces back: formats 3 and 2, and format 1 upgraded (`schemas.FORMATS["trace"]` says what changed); a
garbage line is lost alone, a cut-short last line is truncated, not an error. (`mlacheck.events` documents the event
types.) The counts a process kept in its checkpoint (`events.checkpoint_path`, replaced while it ran) are the last
state of each family of its image whose trace has no final counts: they become a counts event at the end of that image
(at least what it dispatched).

A trace may be hostile (a run folder someone else wrote into) or damaged: it is read as a stream with a limit per
line and on the events kept (a report of 10^5 variants fits), only from a regular file, never through a link (mlacheck.files). An event that does not
fit its kind (a field missing or of the wrong type, an unknown phase, nesting too deep, a format-2 body labelled
format 1) is a bad line, named, never dropped in silence: the run then cannot pass. A dispatch event that repeats the
first of its variant and phase, and all but the last `counts` of a family, say nothing new and are not kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from sys import intern

from mlacheck import schemas
from mlacheck.errors import MlacheckError
from mlacheck.events import EVENT_TYPES, FORMAT_VERSION, checkpoint_path, compile_event, counts_event, dispatch_event
from mlacheck.files import MIB, open_regular, read_json

LINE_LIMIT = 16 * MIB  # a counts event of 100 000 variants is about 2 MiB
EVENT_LIMIT = 1_000_000  # events kept from the traces of one report (a variant costs one to five: 10^5 variants fit)
BYTES_LIMIT = 256 * MIB  # of their lines (an event costs about twice its line in memory)
CHECKPOINT_LIMIT = 16 * MIB  # a counts checkpoint holds one counts table per family: as large as a counts line
COMPILE_PHASES = ("warmup", "capture", "serving", "preexisting", "inherited", "unknown")
DISPATCH_PHASES = ("warmup", "capture", "serving", "unknown")
NET_PHASES = ("warmup", "capture", "serving", "unmarked", "unknown")  # unmarked: format 2's name for unknown
START_PHASES = ("warmup", "capture", "serving", "unknown")
FORMAT_1_TYPES = ("run", "family", "compile", "dispatch", "numerics", "internal_error", "exit")
SHARED = ("family", "phase", "site", "origin", "net", "kernel", "outcome", "function")  # values many events repeat
SHARED_NAMES = ("key", "call", "spelling")  # objects whose field names many events repeat


@dataclass
class Trace:
    """One trace file read back: its events (format 2), whether its last line was cut short, bad lines."""

    events: list[dict]
    truncated: bool = False
    bad_lines: list[str] = field(default_factory=list)
    format_version: int = FORMAT_VERSION
    size: int = 0  # bytes of the lines kept


def read_trace(path: Path, limit: int = EVENT_LIMIT, size_limit: int = BYTES_LIMIT) -> Trace:
    """Read a trace; a bad line loses that line only (named in `bad_lines`, with why where it is JSON), a cut-short
    last line is `truncated`. More than `limit` events kept, or `size_limit` bytes of them, is refused in one line."""
    try:
        file = open_regular(path)
    except FileNotFoundError:
        raise MlacheckError(f"{path}: cannot read the trace: it is gone") from None
    trace, reader = Trace([]), _Reader(limit, size_limit)
    with file:
        number = 0
        while line := file.readline(LINE_LIMIT + 1):
            number += 1
            if len(line) > LINE_LIMIT and not line.endswith(b"\n"):
                while (rest := file.readline(LINE_LIMIT)) and not rest.endswith(b"\n"):
                    pass
                trace.bad_lines.append(f"{path}:{number} (longer than {LINE_LIMIT // MIB} MiB)")
                continue
            if not line.strip():
                continue
            event, why = _parse(line)
            if event is not None and reader.version is None:
                reader.start(path, event)
                trace.format_version = reader.version
            if event is not None:
                why = reader.take(event, trace.events, len(line))
                if why is None:
                    continue
            if why is None and not line.endswith(b"\n"):
                trace.truncated = True  # the line a killed writer was writing
            else:
                trace.bad_lines.append(f"{path}:{number}" + (f" ({why})" if why else ""))
    trace.events, trace.size = [event for event in trace.events if event is not None], reader.size
    if trace.format_version == 1:
        trace.events = upgrade_format_1(trace.events)
    if trace.events:
        _kept_counts(trace, Path(checkpoint_path(path)))
    return trace


def _kept_counts(trace: Trace, path: Path) -> None:
    """The counts a checkpoint kept, as a counts event of each family whose image (the run event of the same
    `started`) has no final counts: its process did not exit normally ("at least"), put at the end of that image. A
    checkpoint that cannot be read, or that no image of the trace owns, is a lost record, named."""
    try:
        state = read_json(path, CHECKPOINT_LIMIT, "a counts checkpoint")
    except FileNotFoundError:
        return
    except MlacheckError as exc:
        trace.bad_lines.append(f"{path} ({str(exc).removeprefix(f'{path}: ')})")
        return
    try:
        if not isinstance(state, dict):
            raise ValueError("not a JSON object")
        schemas.check("counts checkpoint", state.get("format_version"), path)
        images = [index for index, event in enumerate(trace.events) if event["type"] == "run"] or [0]
        owner = next(
            (n for n, index in enumerate(images) if trace.events[index].get("started") == state["started"]), None
        )
        if owner is None:
            raise ValueError("no image of the trace wrote it (its run event's start is not in the trace)")
        end = images[owner + 1] if owner + 1 < len(images) else len(trace.events)
        final = {e["family"] for e in trace.events[images[owner] : end] if e["type"] == "counts" and e.get("final")}
        kept = [
            {**counts_event(name, dict(totals["dispatches"]), dict(totals["calls"]), False), "t": float(state["t"])}
            for name, totals in state["families"].items()
            if name not in final
        ]
        for event in kept:
            why = _wrong(event)
            if why is not None:
                raise ValueError(why)
    except MlacheckError as exc:
        trace.bad_lines.append(f"{path} ({str(exc).removeprefix(f'{path}: ')})")
        return
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        trace.bad_lines.append(f"{path} (not a counts checkpoint mlacheck wrote: {str(exc)[:200]})")
        return
    trace.events[end:end] = kept  # after the image's own counts of those families (the last counts event says all)


def _parse(line: bytes) -> tuple[dict | None, str | None]:
    """The event of a line, else (None, why) where it is JSON of the wrong shape (None where it is not JSON)."""
    try:
        event = json.loads(line)
    except RecursionError:
        return None, "nested too deeply"
    except ValueError:
        return None, None
    if not isinstance(event, dict):
        return None, "not a JSON object"
    if event.get("type") not in EVENT_TYPES:
        return None, f"an unknown event type {str(event.get('type'))[:40]!r}"
    return event, None


class _Reader:
    """The events kept from one trace: checked against their kind, repeats left out, at most `limit`."""

    def __init__(self, limit: int, size_limit: int) -> None:
        self.limit, self.size_limit = limit, size_limit
        self.size = 0
        self.version: int | None = None
        self.image = 0  # a run event after the first starts a new image of the process (an exec)
        self.first_dispatches: set[tuple] = set()
        self.last_counts: dict[tuple, tuple[int, int]] = {}  # (image, family) -> (index, size)
        self.kept = 0
        self.texts: dict[str, str] = {}  # each text of SHARED fields once
        self.stacks: dict[tuple, list] = {}  # each stack once

    def start(self, path: Path, first: dict) -> None:
        if first.get("type") != "run" or "format_version" not in first:
            raise MlacheckError(f"{path}: not an mlacheck trace (its first line is no run event); pass a run folder")
        schemas.check("trace", first["format_version"], path)
        self.version = first["format_version"]

    def take(self, event: dict, events: list, size: int) -> str | None:
        """Keep `event` (None), or why it is a bad line."""
        why = (_wrong_in_format_1 if self.version == 1 else _wrong)(event)
        if why is not None:
            return why
        kind = event["type"]
        if kind == "run" and events:
            self.image += 1
        elif kind == "dispatch" and self.version >= 2:
            first = (self.image, event["family"], event["vid"], event["phase"])
            if first in self.first_dispatches:
                return None
            self.first_dispatches.add(first)
        elif kind == "counts":  # cumulative: the last says all
            earlier = self.last_counts.get((self.image, event["family"]))
            if earlier is not None:
                events[earlier[0]] = None
                self.kept, self.size = self.kept - 1, self.size - earlier[1]
            self.last_counts[(self.image, event["family"])] = (len(events), size)
        self.kept, self.size = self.kept + 1, self.size + size
        if self.kept > self.limit or self.size > self.size_limit:
            raise MlacheckError(
                f"more than {self.limit} events (or {self.size_limit // MIB} MiB of them) to read in the traces, "
                f"at a {kind} event: more than mlacheck reports on at once; report its run folders one at a time"
            )
        events.append(self._shared(event))
        return None

    def _shared(self, event: dict) -> dict:
        """The event with the texts and stacks that many events repeat held once (a variant's events name the same
        family, phase, site and stack: a third of what a report of 10^5 variants holds), its field names and those of
        its key, call and spelling too (the json module makes each line's afresh: another third)."""
        event = {intern(name): value for name, value in event.items()}
        for name in SHARED_NAMES:
            value = event.get(name)
            if type(value) is dict:
                event[name] = {intern(field): item for field, item in value.items()}
        for name in SHARED:
            value = event.get(name)
            if type(value) is str:
                event[name] = self.texts.setdefault(value, value)
        stack = event.get("stack")
        if type(stack) is list and all(type(frame) is str for frame in stack):
            event["stack"] = self.stacks.setdefault(tuple(stack), stack)
        return event


def _wrong(event: dict) -> str | None:
    """Why an event of format 2 or 3 does not fit its kind, else None."""
    kind = event["type"]
    for name, expected in REQUIRED.get(kind, {}).items():
        if name not in event:
            return f"a {kind} event without {name!r}"
        why = _mistyped(kind, name, event[name], expected)
        if why:
            return why
    for name, expected in OPTIONAL.get(kind, {}).items():
        if event.get(name) is not None:
            why = _mistyped(kind, name, event[name], expected)
            if why:
                return why
    if kind == "compile_start" and event.get("vid") is not None and not isinstance(event.get("key"), dict):
        return "a compile_start event with a vid and no key"
    if kind == "counts":
        for label, count in (event.get("dispatches") or {}).items():
            vid, _, phase = label.partition(":")
            if not vid.isdigit() or phase not in DISPATCH_PHASES or not _is(count, int):
                return f"a counts event with a dispatch count {label[:40]!r}: {str(count)[:20]}"
        if any(not _is(count, int) for count in (event.get("calls") or {}).values()):
            return "a counts event with a call count that is not a number"
    return None


def _wrong_in_format_1(event: dict) -> str | None:
    """Why an event does not fit format 1 (keys as lists of strings, phases precompile or dispatch), else None."""
    kind = event["type"]
    if kind not in FORMAT_1_TYPES:
        return f"a {kind} event in a format-1 trace"
    if kind in ("family", "compile", "dispatch", "numerics") and not isinstance(event.get("family"), str):
        return f"a {kind} event without a family name"
    if kind in ("compile", "dispatch", "numerics"):
        if "vid" in event or not isinstance(event.get("key"), list):
            return f"a {kind} event that is not of format 1 (its key is not a list)"
    if kind == "compile" and event.get("phase") not in ("precompile", "dispatch"):
        return f"a compile event whose phase {str(event.get('phase'))[:40]!r} is not of format 1"
    return None


def _mistyped(kind: str, name: str, value: object, expected: object) -> str | None:
    if type(value) in _EXACT.get(expected, ()) or (type(value) is str and value in _CHOICES.get(expected, ())):
        return None  # the usual case, said at once: a value of exactly an expected type, or one of the choices
    if isinstance(expected, tuple) and all(isinstance(choice, str) for choice in expected):
        if value not in expected:
            return f"a {kind} event whose {name} {str(value)[:40]!r} is not one of {', '.join(expected)}"
        return None
    if not _is(value, expected):
        return f"a {kind} event whose {name} is not {_NAMES.get(expected, 'of the right type')}"
    return None


def _is(value: object, expected: object) -> bool:
    """isinstance, where a bool is not a number."""
    return isinstance(value, expected) and not (isinstance(value, bool) and expected in (int, float, (int, float)))


_NAMES = {int: "a whole number", str: "text", dict: "an object", list: "a list", bool: "true or false"}
_NAMES[(int, float)] = "a number"
REQUIRED = {
    "run": {"format_version": int},
    "family": {"family": str},
    "compile": {"family": str, "vid": int, "key": dict, "phase": COMPILE_PHASES},
    "dispatch": {"family": str, "vid": int, "key": dict, "phase": DISPATCH_PHASES},
    "counts": {"family": str},
    "dispatch_error": {"family": str, "function": str},
    "no_lookup": {"family": str, "function": str},
    "context": {"values": dict},
    "numerics": {"family": str},
    "unwatched": {"module": str, "cache": str, "provider": (str, type(None))},
    "unwatched_dispatch": {"module": str, "function": str},
    "unwatched_compile": {"net": str, "phase": NET_PHASES},
    "lost": {"events": int},
    "compile_start": {"id": int, "phase": START_PHASES, "t": (int, float)},
    "compile_end": {"id": int},
    "unseen": {"family": str, "what": str},
    "slow_step": {"function": str, "seconds": (int, float), "usual": (int, float), "t": (int, float)},
}
OPTIONAL = {
    "run": {"pid": int, "ppid": int, "argv": list, "forked_from": int, "host": str, "rank": int},
    "family": {"key_fields": list, "providers": list, "every_lookup_counted": bool},
    "compile": {"seconds": (int, float), "site": str, "stack": list, "origin": str, "t": (int, float)},
    "dispatch": {"site": str, "stack": list, "call": dict},
    "counts": {"dispatches": dict, "calls": dict, "final": bool},
    "dispatch_error": {"reached_lookup": bool, "error": str, "message": str, "site": str},
    "no_lookup": {"site": str},
    "serving_start": {"how": str, "site": str, "t": (int, float)},
    "numerics": {"key": dict},
    "unwatched_compile": {"key": dict, "seconds": (int, float), "site": str, "stack": list, "t": (int, float)},
    "internal_error": {"where": str, "message": str},
    "exit": {"rank": int, "how": str, "t": (int, float)},
    "slow_step": {"step": int, "serving": bool},
    "lost": {"errors": dict},
    "exec": {"path": str, "argv": list, "python": bool, "failed": str},
    "compile_start": {
        "family": str,
        "vid": int,
        "spelling": dict,
        "site": str,
        "stack": list,
        "net": str,
        "kernel": str,
    },
    "compile_end": {"seconds": (int, float), "outcome": ("returned", "raised", "skipped", "cached"), "t": (int, float)},
}


_EXPECTED = {expected for kinds in (REQUIRED, OPTIONAL) for fields in kinds.values() for expected in fields.values()}
_CHOICES = {e: frozenset(e) for e in _EXPECTED if isinstance(e, tuple) and all(isinstance(c, str) for c in e)}
_EXACT = {e: frozenset(e if isinstance(e, tuple) else (e,)) for e in _EXPECTED if e not in _CHOICES}  # bool is no int


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
                compiled = compile_event(
                    family, vid, key, None, phase, event.get("seconds"), "compile", event.get("site"), []
                )
                del compiled["t"]  # format 1 kept no times
                upgraded.append(compiled)
            else:
                tally = counts.setdefault(family, {})
                tally[f"{vid}:serving"] = tally.get(f"{vid}:serving", 0) + 1
                if (family, vid) not in seen:
                    seen.add((family, vid))
                    upgraded.append(dispatch_event(family, vid, key, None, "serving", None, [], {}))
        elif kind == "numerics":
            names = fields.get(event["family"], [])
            key = {
                (names[i] if i < len(names) else f"field{i}"): _guess(t) for i, t in enumerate(event.get("key") or [])
            }
            upgraded.append({**event, "key": key})
        else:
            upgraded.append(event)
    at = next((i for i, e in enumerate(upgraded) if e["type"] == "exit"), len(upgraded))
    exited = at < len(upgraded)
    upgraded[at:at] = [counts_event(family, tally, {}, exited) for family, tally in counts.items()]
    return upgraded


def _guess(text: object) -> object:
    """A format-1 key string back as a typed value (only format 1 needs this)."""
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    try:
        return int(text)
    except ValueError:
        return text
