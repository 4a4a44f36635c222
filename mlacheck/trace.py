"""Reading traces back: formats 4, 3 and 2, and format 1 upgraded (`schemas.FORMATS["trace"]` says what changed); a
garbage line is lost alone, a cut-short last line is truncated, not an error. (`mlacheck.events` documents the event
types; `mlacheck.event_kinds` what each holds.) The counts a process kept in its checkpoint (`events.checkpoint_path`,
replaced while it ran) are the last state of each family of its image whose trace has no final counts: they become a
counts event at the end of that image (at least what it dispatched).

A trace is streamed (`TraceStream`: a report reads each event once, never holding them all), read ahead first for the
serving-start marks of each image (an event before its image's first mark was warm-up). It may be hostile (a run folder
someone else wrote into) or damaged: it is read with a limit per line and on the events given (a report of 10^5
variants fits), only from a regular file, never through a link (mlacheck.files). An event that does not fit its kind
(a field missing or of the wrong type, an unknown phase, nesting too deep, a format-2 body labelled format 1) is a bad
line, named, never dropped in silence: the run then cannot pass. A dispatch event that repeats the first of its
variant and phase, and all but the last `counts` of a family in an image, say nothing new and are not given.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pydantic_core import from_json

from mlacheck import schemas
from mlacheck.errors import MlacheckError
from mlacheck.event_kinds import fits, usual_event, wrong, wrong_in_format_1
from mlacheck.events import EVENT_TYPES, FORMAT_VERSION, checkpoint_path, compile_event, counts_event, dispatch_event
from mlacheck.files import MIB, open_regular, read_json

LINE_LIMIT = 16 * MIB  # a counts event of 100 000 variants is about 2 MiB
EVENT_LIMIT = 1_000_000  # events kept from the traces of one report (a variant costs one to five: 10^5 variants fit)
BYTES_LIMIT = 256 * MIB  # of their lines (an event costs about twice its line in memory)
CHECKPOINT_LIMIT = 16 * MIB  # a counts checkpoint holds one counts table per family: as large as a counts line
RETAINED = {  # the kinds whose values the analysis keeps, one per variant: (texts many events repeat, whether its
    # stack is kept); the other events pass through (a compile_start is kept only until its compile ends)
    "compile": (("family", "phase", "site", "origin"), True),
    "dispatch": (("family", "phase", "site"), False),
    "unwatched_compile": (("net", "kernel", "phase", "site"), True),
}
REPEAT = "a repeat"  # `_Reader.take`: a dispatch event that says nothing new


@dataclass
class Trace:
    """One trace file read back whole: its events (format 2), whether its last line was cut short, bad lines."""

    events: list[dict]
    truncated: bool = False
    bad_lines: list[str] = field(default_factory=list)
    format_version: int = FORMAT_VERSION
    size: int = 0  # bytes of the lines kept


def read_trace(path: Path, limit: int = EVENT_LIMIT, size_limit: int = BYTES_LIMIT) -> Trace:
    """A trace read whole (`TraceStream` says what is kept, and how a bad line is lost alone)."""
    stream = TraceStream(path, limit, size_limit)
    events = [event for _, event in stream]
    return Trace(events, stream.truncated, stream.bad_lines, stream.format_version, stream.size)


class TraceStream:
    """A trace read as a stream: iterating yields (position, event) of each event kept, the position growing with the
    line (a format-1 trace is read whole, then upgraded). A bad line loses that line only (named in `bad_lines`, with
    why where it is JSON), a cut-short last line is `truncated`; more than `limit` events kept, or `size_limit` bytes
    of them, is refused in one line. An image's counts come at its end: the last of each family, then those its
    checkpoint kept. `marks` (read ahead, before the first event comes) holds the position of each image's last
    serving-start mark; `count` and `size` say how many events and bytes of lines came."""

    def __init__(self, path: Path, limit: int = EVENT_LIMIT, size_limit: int = BYTES_LIMIT) -> None:
        try:
            self._file = open_regular(path)
        except FileNotFoundError:
            raise MlacheckError(f"{path}: cannot read the trace: it is gone") from None
        self.path, self.truncated, self.bad_lines = path, False, []
        self.format_version, self.size, self.count = FORMAT_VERSION, 0, 0
        try:
            marks = _marks(self._file, path)
            self.marks, self._whole = marks or {}, marks is None  # (None: format 1, read whole)
        except BaseException:
            self._file.close()
            raise
        self._reader = _Reader(limit, size_limit, self.marks)

    def __iter__(self) -> Iterator[tuple[int, dict]]:
        with self._file:
            kept = self._kept(self._file)
            late = _Images(Path(checkpoint_path(self.path)), defer=not self._whole)
            if self._whole:  # format 1: each family's counts made once, where its process exited
                kept = enumerate(upgrade_format_1([event for _, event in kept]))
            yield from late.of(kept)
        self.size, self.count = self._reader.size, late.count
        self.bad_lines += late.bad_lines

    def _kept(self, file: BinaryIO) -> Iterator[tuple[int, dict]]:
        """(line number, event) of each line kept."""
        reader = self._reader
        for number, line in _lines(file):
            if line is None:
                self.bad_lines.append(f"{self.path}:{number} (longer than {LINE_LIMIT // MIB} MiB)")
                continue
            event = usual_event(line) if reader.version is not None and reader.version >= 2 else None
            fitted = event is not None  # (read and checked against its kind in one pass)
            if not fitted:
                event, why = _parse(line)
            if event is not None and reader.version is None:
                reader.start(self.path, event)
                self.format_version = reader.version
            if event is not None:
                why = reader.take(event, len(line), number, fitted)
                if why is None:
                    yield number, event
                if why is None or why is REPEAT:
                    continue
            if why is None and not line.endswith(b"\n"):
                self.truncated = True  # the line a killed writer was writing
            else:
                self.bad_lines.append(f"{self.path}:{number}" + (f" ({why})" if why else ""))


def _lines(file: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(number, line) of each line that is not blank; None for one longer than LINE_LIMIT (the rest of it skipped)."""
    number = 0
    while line := file.readline(LINE_LIMIT + 1):
        number += 1
        if len(line) > LINE_LIMIT and not line.endswith(b"\n"):
            while (rest := file.readline(LINE_LIMIT)) and not rest.endswith(b"\n"):
                pass
            yield number, None
        elif not line.isspace():  # (ASCII whitespace, as strip's)
            yield number, line


def _marks(file: BinaryIO, path: Path) -> dict[int, int] | None:
    """Read ahead: the line number of each image's first serving-start mark (None: a format-1 trace, read whole). Each
    line is parsed until the first event is kept; after it, only a line that could be a run event or a mark
    (`_candidates`). The file is left at its start."""
    version, kept = None, None
    for number, line in _lines(file):
        event = None if line is None else _parse(line)[0]
        if event is None:
            continue
        version = _first(path, event) if version is None else version
        if version == 1 or wrong(event) is None:
            kept = (number, event)
            break
    marks: dict[int, int] = {}
    if version not in (1, None) and kept is not None:
        start, image = kept[0], 0
        if kept[1]["type"] == "serving_start":
            marks[image] = start
        for number, line in _candidates(file, start):
            event = _parse(line)[0]
            if event is not None and wrong(event) is None:
                if event["type"] == "run":
                    image += 1
                elif event["type"] == "serving_start":
                    marks.setdefault(image, number)
    file.seek(0)
    return None if version == 1 else marks


MAY_START = (b'"run"', b'"serving_start"', b"\\", b"\x00")  # a line that is a run event or a mark holds one: it
# names it, or spells text with an escape or in UTF-16 or -32 (which could spell it)
BLOCK = 1 * MIB


def _candidates(file: BinaryIO, number: int) -> Iterator[tuple[int, bytes]]:
    """(number, line) of each line after line `number` (where the file is) that holds one of MAY_START, read in
    blocks; a line longer than LINE_LIMIT is left out (the reading calls it a bad line)."""
    pending, skipping = b"", False
    while True:
        block = file.read(BLOCK)
        data = pending + block
        if skipping:  # the rest of a line longer than LINE_LIMIT
            end = data.find(b"\n")
            if end < 0:
                pending = b""
                if block:
                    continue
                return
            number, data, skipping = number + 1, data[end + 1 :], False
        cut = data.rfind(b"\n") + 1 if block else len(data)
        whole, pending = data[:cut], data[cut:]
        number = yield from _holding(whole, number)
        if not block:
            return
        if len(pending) > LINE_LIMIT:
            pending, skipping = b"", True


def _holding(whole: bytes, number: int) -> Generator[tuple[int, bytes], None, int]:
    """(number, line) of each line of `whole` (lines after line `number`) that holds one of MAY_START; returns the
    number of its last line (its lines counted once, as it goes)."""
    spans = set()
    for pattern in MAY_START:
        at = whole.find(pattern)
        while at >= 0:
            end = whole.find(b"\n", at) + 1 or len(whole)
            spans.add((whole.rfind(b"\n", 0, at) + 1, end))
            at = whole.find(pattern, end)
    counted = 0
    for start, end in sorted(spans):
        number, counted = number + whole.count(b"\n", counted, start), start
        line = whole[start:end]
        if len(line) - line.endswith(b"\n") <= LINE_LIMIT:
            yield number + 1, line
    return number + whole.count(b"\n", counted)


class _Images:
    """The events kept, with each image's counts at its end (`defer`; format 1's where they are): the last counts event
    of each family (the earlier ones say nothing new), then the counts its process kept in its checkpoint (`events.checkpoint_path`, replaced while it
    ran), of each family whose image (the run event of the same `started`) has no final counts: its process did not
    exit normally ("at least"). A checkpoint that cannot be read, or that no image of the trace owns, is a lost record,
    named in `bad_lines` once the events are read."""

    def __init__(self, checkpoint: Path, defer: bool) -> None:
        self.checkpoint, self.defer, self.bad_lines = checkpoint, defer, []
        self.count = 0  # the events given
        self.state: dict | None = None  # the checkpoint (read at the first image's end), until an image took it
        self.read = self.runs = False

    def of(self, kept: Iterator[tuple[int, dict]]) -> Iterator[tuple[int, dict]]:
        first: dict | None = None
        counts: dict[str, tuple[int, dict]] = {}
        position = 0
        for position, event in kept:
            kind = event["type"]
            if kind == "run" and first is not None:
                yield from self._ended(first, counts, position, False)
                first, counts = None, {}
            if first is None:
                first = event
                self.runs |= kind == "run"
            if kind == "counts":
                counts[event["family"]] = (position, event)
                if self.defer:
                    continue
            self.count += 1
            yield position, event
        if first is not None:
            yield from self._ended(first, counts, position, True)
        if self.read and self.state is not None:
            self._lost("no image of the trace wrote it (its run event's start is not in the trace)")

    def _ended(self, first: dict, counts: dict, position: int, last: bool) -> Iterator[tuple[int, dict]]:
        """An image's end: its counts, and its checkpoint's where it owns one."""
        ordered = sorted(counts.values(), key=lambda item: item[0])
        if self.defer:
            self.count += len(ordered)
            yield from ordered
        if not self.read:
            self.read, self.state = True, self._state()
        if self.state is None or not (first["type"] == "run" or (last and not self.runs)):
            return
        if first.get("started") != self.state["started"]:
            return
        state, self.state = self.state, None
        final = {event["family"] for _, event in ordered if event.get("final")}
        try:
            kept = [
                {**counts_event(name, dict(totals["dispatches"]), dict(totals["calls"]), False), "t": float(state["t"])}
                for name, totals in state["families"].items()
                if name not in final
            ]
            for event in kept:
                why = wrong(event)
                if why is not None:
                    raise ValueError(why)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self._lost(str(exc))
            return
        self.count += len(kept)
        for event in kept:
            yield position, event

    def _state(self) -> dict | None:
        """The checkpoint, where there is one that reads as one (else None; what is wrong with it is a bad line)."""
        path = self.checkpoint
        try:
            state = read_json(path, CHECKPOINT_LIMIT, "a counts checkpoint")
        except FileNotFoundError:
            return None
        except MlacheckError as exc:
            self.bad_lines.append(f"{path} ({str(exc).removeprefix(f'{path}: ')})")
            return None
        try:
            if not isinstance(state, dict):
                raise ValueError("not a JSON object")
            schemas.check("counts checkpoint", state.get("format_version"), path)
            state["started"]  # noqa: B018 - a checkpoint without it is refused as one
        except MlacheckError as exc:
            self.bad_lines.append(f"{path} ({str(exc).removeprefix(f'{path}: ')})")
            return None
        except (ValueError, KeyError) as exc:
            self._lost(str(exc))
            return None
        return state

    def _lost(self, why: str) -> None:
        self.state = None
        self.bad_lines.append(f"{self.checkpoint} (not a counts checkpoint mlacheck wrote: {why[:200]})")


def _parse(line: bytes) -> tuple[dict | None, str | None]:
    """The event of a line, else (None, why) where it is JSON of the wrong shape (None where it is not JSON)."""
    try:
        event = _loads(line)
    except RecursionError:
        return None, "nested too deeply"
    except ValueError:
        return None, None
    if not isinstance(event, dict):
        return None, "not a JSON object"
    kind = event.get("type")
    if type(kind) is not str or kind not in EVENT_TYPES:
        return None, f"an unknown event type {str(kind)[:40]!r}"
    return event, None


def _loads(line: bytes) -> object:
    """json.loads of a line, the usual case at once: pydantic-core's JSON reader (its strings shared as it reads,
    about twice as fast as the json module's scanner), which reads a value as json.loads does wherever it reads one;
    anything it refuses (a lone surrogate escaped, deep nesting, another encoding, a bad line) goes to json.loads,
    which decides."""
    try:
        return from_json(line)
    except ValueError:
        return json.loads(line)


def _first(path: Path, first: dict) -> int:
    """The format of a trace, from its first event (a run event, else it is no trace: refused in one line)."""
    if first.get("type") != "run" or "format_version" not in first:
        raise MlacheckError(f"{path}: not an mlacheck trace (its first line is no run event); pass a run folder")
    schemas.check("trace", first["format_version"], path)
    return first["format_version"]


class _Reader:
    """The events kept from one trace: checked against their kind, repeats left out, at most `limit`."""

    def __init__(self, limit: int, size_limit: int, marks: dict[int, int]) -> None:
        self.limit, self.size_limit = limit, size_limit
        self.size = 0
        self.version: int | None = None
        self.image = 0  # a run event after the first starts a new image of the process (an exec)
        self.marks = marks  # each image's first serving-start mark (`TraceStream.marks`)
        self.first_dispatches: set[tuple] = set()
        self.last_counts: dict[tuple, int] = {}  # (image, family) -> the size of its last counts line
        self.kept = 0
        self.texts: dict[str, str] = {}  # each text of RETAINED fields once
        self.stacks: dict[tuple, list] = {}  # each stack once

    def start(self, path: Path, first: dict) -> None:
        self.version = _first(path, first)

    def take(self, event: dict, size: int, number: int, fitted: bool = False) -> str | None:
        """Keep `event` (line `number`; `fitted`: known to fit its kind; None: kept, made to share what it repeats),
        leave it out (REPEAT: it says nothing new), or why it is a bad line. A dispatch repeats an earlier one of its
        variant in the same phase on the same side of its image's serving-start mark (a phase as written is settled by
        the mark: the first serving dispatch after it is new, whatever phase the warm-up's before it was written
        with)."""
        if self.version == 1:
            why = wrong_in_format_1(event)
        else:
            why = None if fitted or fits(event) else wrong(event)
        if why is not None:
            return why
        kind = event["type"]
        if kind == "run" and self.kept:
            self.image += 1
        elif kind == "dispatch" and self.version >= 2:
            before_mark = self.image in self.marks and number < self.marks[self.image]
            first = (self.image, event["family"], event["vid"], event["phase"], before_mark)
            if first in self.first_dispatches:
                return REPEAT
            self.first_dispatches.add(first)
        elif kind == "counts":  # cumulative: the last says all (`_Images` keeps it alone)
            earlier = self.last_counts.get((self.image, event["family"]))
            if earlier is not None:
                self.kept, self.size = self.kept - 1, self.size - earlier
            self.last_counts[(self.image, event["family"])] = size
        self.kept += 1
        self.size += size
        if self.kept > self.limit or self.size > self.size_limit:
            raise MlacheckError(
                f"more than {self.limit} events (or {self.size_limit // MIB} MiB of them) to read in the traces, "
                f"at a {kind} event: more than mlacheck reports on at once; report its run folders one at a time"
            )
        retained = RETAINED.get(kind)
        if retained is not None:
            self._shared(event, retained[0], retained[1])
        return None

    def _shared(self, event: dict, texts: tuple, stacked: bool) -> None:
        """The texts and stacks that many events repeat, held once (a variant's events name the same family, phase,
        site and stack; the JSON reader shares short texts and field names itself, not a long site or a stack): what
        the analysis keeps of 10^5 variants is then mostly their own."""
        for name in texts:
            value = event.get(name)
            if type(value) is str:
                event[name] = self.texts.setdefault(value, value)
        stack = event.get("stack") if stacked else None
        if type(stack) is list:  # (its frames are text: the event's kind check says so)
            event["stack"] = self.stacks.setdefault(tuple(stack), stack)


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
