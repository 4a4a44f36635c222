"""Events to variant tables: one table per (process, family), each process's cache on its own.

A variant is one cache key of one spelling. Its compile phase says who put it in the cache (warm-up,
CUDA-graph capture, the serving path, or it was there before: preexisting, inherited by a forked
child); its dispatches are counted by phase from the process's last `counts` event (exact when the
process exited, "at least" otherwise). Phases are settled by the one phase model (`capture.phase.settled`): in a
process that marked serving start, a serving compile or dispatch before the mark was warm-up.

A compile that began (`compile_start`) and never ended (no `compile_end`: its process died in it, or exited while it
still ran) is never nothing: on the serving path with its key known, its variant is a serving-path compile whose stall
lasted at least until the process's last recorded moment; any other is one of its process's `unfinished` compiles
(`analysis.unfinished` reports them). So is one that ended (returned) in a process that died before the compile's own
record (its `compile` or `unwatched_compile` event, written after `compile_end`) arrived: with its key known, a
serving-path compile of that variant as long as it took; else an `unfinished` compile, `ended`. Which record closes
which compile is `brackets`'s: a record that names its compile (format 4) and no compile of its process is a `stray`.

A serving launch that waited for its variant's async compile, begun before it (Triton's AsyncCompileMode: a record of
origin `wait`), stalled as a serving-path compile does: its variant is a serving-path compile, the wait its stall; a
wait off the serving path is the warm-up's own time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import ClassVar

from mlacheck.analysis.brackets import Brackets
from mlacheck.analysis.figures import worst
from mlacheck.capture.phase import NOT_COMPILED_HERE, SERVING, UNKNOWN, settled
from mlacheck.keys import JsonValue, Key, key_identity

WAIT = "wait"  # a compile record's origin: a launch waited for the variant's async compile (`events.compile_event`)


@dataclass(slots=True)
class Variant:
    """One cache entry of a family, as one process (or, merged, the whole run) saw it. The report says of it what
    `REPORTED` names, fields and properties (report/model.py builds the JSON report's variant from them). A run holds
    one per variant and process, and one merged: its slots, and its key shared with its events, keep it small."""

    key: Key
    spelling: dict | None = None
    precompiled: bool = False
    compile_phase: str | None = None
    compile_s: float | None = None
    compiled_by: str | None = None
    captured: bool = False
    dispatches: int = 0
    warmup_dispatches: int = 0
    capture_dispatches: int = 0
    at_least: bool = False  # counts from a process that did not exit normally
    first_dispatch_site: str | None = None
    first_call: dict[str, JsonValue] = field(default_factory=dict)  # the call facts of the first serving dispatch
    serving_path_compile: bool = False
    serving_path_compile_s: float | None = None
    serving_path_site: str | None = None
    serving_path_stack: list[str] = field(default_factory=list)
    # compile, skip, unknown (no watched compile made the entry), or wait (a serving launch waited for its async
    # compile, begun in the warm-up: `serving_path_compile_s` is the wait)
    serving_path_origin: str | None = None
    unfinished: str | None = None  # how its serving-path compile never ended ("the process died in it", ...)
    unverified: bool = False  # precompiled, never dispatched, and the dispatches that could have checked it died
    numerics: dict[str, float | None] | None = None  # the launched kernel against the reference, worst of its launches
    procs: list[int | None] = field(default_factory=list)
    first_phases: tuple[str, ...] = ()  # the phases of its first dispatches (one event each)

    REPORTED: ClassVar[tuple[str, ...]] = (
        "key",
        "spelling",
        "precompiled",
        "compile_phase",
        "compile_s",
        "compiled_by",
        "captured",
        "dispatches",
        "dispatches_at_least",
        "warmup_dispatches",
        "capture_dispatches",
        "serving_path_compile_s",
        "serving_path_site",
        "first_dispatch_site",
        "first_call",
        "status",
        "numerics",
    )  # what the report says of it, in order

    @property
    def identity(self) -> tuple:
        spelling = self.spelling or {}
        return key_identity(self.key), tuple(spelling.get("positional") or ()), tuple(spelling.get("keywords") or ())

    @property
    def dispatches_at_least(self) -> bool:
        """Its serving dispatches are a lower bound (a process that counted them did not exit normally)."""
        return self.at_least and self.dispatches > 0

    @property
    def status(self) -> str:
        if self.serving_path_compile:
            return "serving-path compile"
        if self.precompiled and not self.dispatches:
            if self.captured:
                return "captured"
            if self.compile_phase in NOT_COMPILED_HERE:  # no compile of its own here: no warm-up of its own
                return "unused"
            return "unverified" if self.unverified else "dead warm-up"
        return "ok" if self.precompiled else "not compiled"


@dataclass
class ProcessFamily:
    """One family in one process: its variants, dispatch calls and what went wrong in them."""

    proc: int | None
    family: str
    version: str | None = None
    fingerprint: str | None = None
    providers: tuple[str, ...] = ()  # "name version" of the distributions that install the family's package
    key_fields: list[str] = field(default_factory=list)
    variants: dict[int, Variant] = field(default_factory=dict)  # by vid
    calls: dict[str, int] = field(default_factory=dict)  # function, function!before|after|nolookup -> count
    errors: list[dict] = field(default_factory=list)
    no_lookup: list[dict] = field(default_factory=list)  # the first call of a function that returned without a lookup
    exact: bool = False
    every_lookup_counted: bool | None = None  # the capture said whether it counts every lookup of the cache
    unnamed: set[int] = field(default_factory=set)  # vids the counts name and no compile or dispatch record shows
    unjudged: list[dict] = field(default_factory=list)  # keys measured (numerics) that no variant's record shows
    marked: bool = False  # its process marked serving start
    # a disk cache's family: the entries its compiles made, and those its process found there that none made, in order
    built: set[str] = field(default_factory=set)
    foreign: list[str] = field(default_factory=list)
    # entered the cache built by nothing seen, after the mark or in a process that never marked it: (the variant, how
    # many foreign entries its process had found by then, its site); `analysis.borrowed` takes in those of the run's
    unsettled: list[tuple[Variant, int, str | None]] = field(default_factory=list)
    by_key: dict[tuple, Variant] = field(default_factory=dict, repr=False)  # the first variant of each key identity
    indexed: int = 0  # (of the first `indexed` variants: `variant_of` takes in the rest)

    def variant_of(self, key: dict) -> Variant | None:
        """The first variant of a key's identity, found at once (a walk over every variant per `numerics` event took
        hours at 10^5): the index takes in the variants added since it last looked."""
        added = list(islice(reversed(self.variants.values()), len(self.variants) - self.indexed))  # newest first
        for variant in reversed(added):
            self.by_key.setdefault(key_identity(variant.key), variant)
        self.indexed = len(self.variants)
        return self.by_key.get(key_identity(key))

    @property
    def lookups(self) -> int:
        return sum(v.dispatches + v.warmup_dispatches + v.capture_dispatches for v in self.variants.values())

    @property
    def died_before_lookup(self) -> int:
        return sum(count for name, count in self.calls.items() if name.endswith("!before"))

    @property
    def returned_without_lookup(self) -> int:
        return sum(count for name, count in self.calls.items() if name.endswith("!nolookup")) or len(self.no_lookup)

    @property
    def dispatch_calls(self) -> int:
        return sum(count for name, count in self.calls.items() if "!" not in name)

    @property
    def used(self) -> bool:
        """Anything happened: a variant entered the cache, or a dispatch was called."""
        return bool(self.variants) or bool(self.calls) or bool(self.errors)


@dataclass
class UnfinishedCompile:
    """A compile that began and never ended, that no variant stands for (its key was not known yet, or it was not on
    the serving path, or a compile net's)."""

    start: dict  # its compile_start event
    phase: str  # settled
    at_least: float  # seconds from its start to the process's last recorded moment (ended: as long as it took)
    how: str  # "the process died in it", "the process was still in it when it exited", or (ended) why unrecorded
    ended: bool = False  # it returned, and the process died before its record was written


@dataclass
class ProcessFacts:
    """What one process showed about itself: serving start, context values, whether it exited."""

    proc: int | None
    pid: int | None = None
    host: str | None = None
    exited: bool = False
    serving_started: str | None = None  # how
    context: dict[str, str] = field(default_factory=dict)
    unfinished: list[UnfinishedCompile] = field(default_factory=list)
    format_version: int | None = None  # its trace's (4 on: a watched compile's record names its compile_start)
    strays: int = 0  # compile records naming no open compile of their family that the process began
    first_stray: dict | None = None  # the first of them


def first_marks(events: list[dict]) -> dict[int | None, int]:
    """Per process, the index of its first serving-start mark (the capture writes one; after it, every compile is
    serving)."""
    marks: dict[int | None, int] = {}
    for index, event in enumerate(events):
        if event["type"] == "serving_start":
            marks.setdefault(event.get("proc"), index)
    return marks


def build_tables(events: list[dict]) -> tuple[dict[tuple, ProcessFamily], dict[int | None, ProcessFacts]]:
    """Per-(process, family) tables and per-process facts from the events of one or more traces."""
    reader = TablesReader(first_marks(events))
    for index, event in enumerate(events):
        reader.read(index, event)
    return reader.finish()


class TablesReader:
    """`build_tables` event by event: what a process says of itself goes to its facts, what a family's event says to
    its table (`FAMILY_EVENTS`); compile brackets (`compile_start`, `compile_end`) are held until their record comes.
    `marks`: per process, the position of its first serving-start mark (an event before it, in its process, was
    before serving started); `read` takes each event with its position."""

    def __init__(self, marks: dict[int | None, int]) -> None:
        self.tables: dict[tuple, ProcessFamily] = {}
        self.facts: dict[int | None, ProcessFacts] = {}
        self.marks = marks
        self.last_counts: dict[tuple, dict] = {}
        self.brackets = Brackets()  # the compiles not closed: not ended, or returned and awaiting their record
        self.netted: dict[tuple, set[str]] = {}  # (proc, net) -> the disk cache entries its netted compiles made
        self.last_t: dict[int | None, float] = {}

    def read(self, index: int, event: dict) -> None:
        self.take(index, event, event["type"], event.get("proc"), event.get("t"))

    def take(self, index: int, event: dict, kind: str, proc: int | None, t: object) -> None:
        """`read` of an event whose kind, process and time (its "type", "proc" and "t") were looked up once (the digest
        reads each event so); the event goes only to what reads its kind (`KINDS`, else `_other`)."""
        if proc not in self.facts:
            self.facts[proc] = ProcessFacts(proc)
        if isinstance(t, (int, float)):
            last = self.last_t.get(proc, 0.0)
            self.last_t[proc] = t if t > last else last  # (max's own choice, without its call)
        self.KINDS.get(kind, TablesReader._other)(self, index, event, proc, kind)

    def _other(self, index: int, event: dict, proc: int | None, kind: str) -> None:
        """A record closes the compile that returned and awaited it (an unwatched compile's, unless it raised: its
        bracket closed already), a process's event says what it showed of itself, a family's goes to its table."""
        if kind == "compile" and event.get("origin") == "compile":
            if event.get("start") is not None:
                if not self.brackets.named(proc, event):
                    _stray(self.facts[proc], event)
            elif (self.facts[proc].format_version or 0) < 4:  # (from format 4 on, a record names its compile)
                self.brackets.matched(proc, event)
        elif kind == "unwatched_compile" and not event.get("raised"):
            self.brackets.matched(proc, event)
        if kind == "unwatched_compile" and event.get("entries") and type(event.get("net")) is str:
            self.netted.setdefault((proc, event["net"]), set()).update(event["entries"])  # a jit_dir family's net
        if kind in PROCESS_EVENTS:
            PROCESS_EVENTS[kind](self.facts[proc], event)
        if "family" in event and kind not in ("internal_error", "unseen"):
            self._family_event(index, event, proc, kind)

    def _bracket(self, index: int, event: dict, proc: int | None, kind: str) -> None:
        self.brackets.take(index, event, proc, kind)

    def _family_event(self, index: int, event: dict, proc: int | None, kind: str) -> None:
        table = self.tables.get((proc, event["family"]))
        if table is None:
            table = self.tables[(proc, event["family"])] = ProcessFamily(
                proc, event["family"], marked=proc in self.marks
            )
        if kind == "counts":
            self.last_counts[(proc, event["family"])] = event
        elif kind in FAMILY_EVENTS:
            FAMILY_EVENTS[kind](table, event, proc in self.marks and index < self.marks[proc])

    KINDS = {"compile_start": _bracket, "compile_end": _bracket}  # (`_other`: every other kind)

    def finish(self) -> tuple[dict[tuple, ProcessFamily], dict[int | None, ProcessFacts]]:
        """The compiles never ended (or never recorded), the last counts of each table, and what is exact."""
        for proc, (index, start, end) in self.brackets.left():
            if end is None or not self.facts[proc].exited:  # an exited process wrote every record it had
                phase = settled(start["phase"], proc in self.marks and index < self.marks[proc])
                _unfinished(self.tables, self.facts[proc], start, end, phase, self.last_t)
        for (proc, family), event in self.last_counts.items():
            _counted(self.tables[(proc, family)], event)
        for (proc, family), table in self.tables.items():
            table.exact = self.facts[proc].exited and (proc, family) in self.last_counts
            for variant in table.variants.values():
                variant.procs = [proc]
                variant.at_least |= not table.exact
                _at_least_once(variant)
        return self.tables, self.facts


def _ran(fact: ProcessFacts, event: dict) -> None:
    fact.pid, fact.host, fact.format_version = event.get("pid"), event.get("host"), event.get("format_version")


def _stray(fact: ProcessFacts, event: dict) -> None:
    """A record naming a compile its process did not begin: counted, the first kept (a hostile trace's 10^6 are not)."""
    fact.strays += 1
    fact.first_stray = fact.first_stray or event


def _exited(fact: ProcessFacts, event: dict) -> None:
    fact.exited = True


def _serving_started(fact: ProcessFacts, event: dict) -> None:
    fact.serving_started = event.get("how") or "marked"


def _context(fact: ProcessFacts, event: dict) -> None:
    fact.context.update({name: str(value) for name, value in (event.get("values") or {}).items() if value is not None})


PROCESS_EVENTS = {"run": _ran, "exit": _exited, "serving_start": _serving_started, "context": _context}


def _family(table: ProcessFamily, event: dict, before_mark: bool) -> None:
    table.version, table.fingerprint = event.get("version"), event.get("fingerprint")
    table.providers = tuple(event.get("providers") or ())
    table.key_fields = list(event.get("key_fields") or [])
    table.every_lookup_counted = event.get("every_lookup_counted")


def _compile(table: ProcessFamily, event: dict, before_mark: bool) -> None:
    table.built.update(event.get("entries") or ())
    table.foreign += event.get("foreign") or ()
    phase = settled(event["phase"], before_mark)
    if event.get("origin") == WAIT and phase != SERVING:  # a launch before serving waited: the warm-up's own time
        return
    if phase == UNKNOWN:
        table.unsettled.append((_variant(table, event), len(table.foreign), event.get("site")))
    else:
        _compiled(_variant(table, event), event, phase)


def _dispatch(table: ProcessFamily, event: dict, before_mark: bool) -> None:
    variant = _variant(table, event)
    phase = settled(event["phase"], before_mark)
    if phase == "serving" and variant.first_dispatch_site is None:
        variant.first_dispatch_site, variant.first_call = event.get("site"), dict(event.get("call") or {})
    variant.captured |= phase == "capture"
    if phase not in variant.first_phases:
        variant.first_phases += (phase,)


def _dispatch_error(table: ProcessFamily, event: dict, before_mark: bool) -> None:
    table.errors.append(event)


def _no_lookup(table: ProcessFamily, event: dict, before_mark: bool) -> None:
    table.no_lookup.append(event)


def _measured(table: ProcessFamily, event: dict, before_mark: bool) -> None:
    """A launched variant's output against the reference: the worst of its launches is kept; a measurement of a
    variant no record of the process shows cannot be judged (`unjudged`)."""
    variant = table.variant_of(event["key"])
    if variant is None:
        table.unjudged.append(event["key"])
        return
    variant.numerics = worst(variant.numerics, event.get("kernel"))


FAMILY_EVENTS = {
    "family": _family,
    "compile": _compile,
    "dispatch": _dispatch,
    "dispatch_error": _dispatch_error,
    "no_lookup": _no_lookup,
    "numerics": _measured,
}  # (a family's `counts` event: only its process's last one counts, read at the end)


def _unfinished(
    tables: dict[tuple, ProcessFamily],
    fact: ProcessFacts,
    start: dict,
    end: dict | None,
    phase: str,
    last_t: dict[int | None, float],
) -> None:
    """A compile that began and never ended in its process, or that ended and whose record never came (the process
    died first): its variant's serving-path compile where it has one."""
    if end is not None:
        at_least, how = end.get("seconds") or 0.0, "the process died before its cache entry was recorded"
    else:
        at_least = max(0.0, last_t.get(fact.proc, start["t"]) - start["t"])
        how = "the process was still in it when it exited" if fact.exited else "the process died in it"
    table = tables.get((fact.proc, start.get("family")))
    if phase == SERVING and table is not None and start.get("vid") is not None:
        variant = _variant(table, start)
        serving_path_compile(variant, at_least, start.get("site"), list(start.get("stack") or []), "compile")
        if end is None:
            variant.unfinished = variant.unfinished or how
    else:
        fact.unfinished.append(UnfinishedCompile(start, phase, at_least, how, ended=end is not None))


def _variant(table: ProcessFamily, event: dict) -> Variant:
    variant = table.variants.get(event["vid"])
    if variant is None:
        variant = table.variants[event["vid"]] = Variant(event["key"], event.get("spelling"))
    return variant


def _compiled(variant: Variant, event: dict, phase: str) -> None:
    if phase == "serving":
        serving_path_compile(
            variant, event.get("seconds"), event.get("site"), list(event.get("stack") or []), event.get("origin")
        )
    elif not variant.precompiled:
        precompiled(variant, phase, event.get("seconds"), event.get("site"))
        variant.captured |= phase == "capture"


def serving_path_compile(
    variant: Variant, seconds: float | None, site: str | None, stack: list[str], origin: str | None
) -> None:
    """A serving-path compile: the longest stall is kept, and the site and origin of the first."""
    variant.serving_path_compile = True
    if seconds is not None:
        variant.serving_path_compile_s = max(variant.serving_path_compile_s or 0.0, seconds)
    if variant.serving_path_site is None:
        variant.serving_path_site, variant.serving_path_stack = site, stack
        variant.serving_path_origin = origin


def precompiled(variant: Variant, phase: str | None, seconds: float | None, site: str | None) -> None:
    """A compile outside the serving path (or an entry with none of its own): the first one is the variant's."""
    if not variant.precompiled:
        variant.precompiled, variant.compile_phase, variant.compile_s, variant.compiled_by = True, phase, seconds, site


def _counted(table: ProcessFamily, event: dict) -> None:
    table.calls = {name: int(count) for name, count in (event.get("calls") or {}).items()}
    seen = {vid for vid in table.variants}
    for label, count in (event.get("dispatches") or {}).items():
        vid_text, _, phase = label.partition(":")
        vid = int(vid_text)
        if vid not in seen:
            table.unnamed.add(vid)  # its compile and first dispatch records were lost (counted or not)
            continue
        if not count:
            continue
        variant = table.variants[vid]
        if phase == "serving":
            variant.dispatches += count
        elif phase == "capture":
            variant.capture_dispatches += count
            variant.captured = True
        else:
            variant.warmup_dispatches += count


def _at_least_once(variant: Variant) -> None:
    """A first dispatch whose count was never written (the process was killed first) is at least one."""
    for phase, attribute in (
        ("serving", "dispatches"),
        ("warmup", "warmup_dispatches"),
        ("capture", "capture_dispatches"),
    ):
        if phase in variant.first_phases and not getattr(variant, attribute):
            setattr(variant, attribute, 1)
            variant.at_least = True
