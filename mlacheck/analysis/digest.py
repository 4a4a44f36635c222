"""What the analysis keeps of the events, read once and one at a time: a run folder's traces stream through it, never
held whole (10^5 variants are some 400 000 events). Each part of the analysis reads each event as it comes: the
variant tables and each process's facts (`tables`), the compile timeline (`timeline`), what no watched family covers
(`unwatched`); the few events that say what capture could not see or where mlacheck failed are kept as they are, with
what a program report says of the run (the families recorded, the target arch the processes showed, the values each
key field took).

An event comes with its position: in its process, a later event has a larger one. `marks` holds, per process, the
position of its first serving-start mark, known before its events come (a trace is read ahead for them): the phase of a
compile or dispatch before it is settled as warm-up.
"""

from __future__ import annotations

from mlacheck.analysis.tables import TablesReader, first_marks
from mlacheck.analysis.timeline import TimelineReader
from mlacheck.analysis.unwatched import UnwatchedReader

KEPT = ("unseen", "internal_error")  # the kinds of events kept as they are (few)
USUAL = frozenset(("compile_start", "compile_end", "compile", "dispatch"))  # a variant's events: most of a trace's


class Digest:
    """The events read one at a time (`read`); `key_values`: also every value each key field took in the compiles and
    dispatches recorded (what a --context value is checked against)."""

    def __init__(self, key_values: bool = False) -> None:
        self.marks: dict[int | None, int] = {}
        self.tables = TablesReader(self.marks)
        self.timeline = TimelineReader(self.marks, self.tables)  # (given each event after the tables)
        self.unwatched = UnwatchedReader(self.marks)
        self.kept: dict[str, list[dict]] = {kind: [] for kind in KEPT}
        self.families: set[str] = set()  # every family a record names (not an unseen or internal error line)
        self.shown_arch: str | None = None  # the last context event's target arch
        self.run_arch: str | None = None  # the first run event's target arch (or CuTe DSL arch)
        self.key_values: dict[str, list] | None = {} if key_values else None

    @classmethod
    def of(cls, events: list[dict]) -> Digest:
        """The digest of events held in a list (the scenario's, a test's), each at its index."""
        digest = cls()
        digest.marks.update(first_marks(events))
        for index, event in enumerate(events):
            digest.read(index, event)
        return digest

    def read(self, position: int, event: dict) -> None:
        kind, proc, t = event["type"], event.get("proc"), event.get("t")
        self.tables.take(position, event, kind, proc, t)
        self.timeline.take(event, kind, proc, t)
        if kind in USUAL:  # (most events: what the rest asks of them, at once)
            if "family" in event:
                self.families.add(event["family"])
            if self.key_values is not None and kind in ("compile", "dispatch"):
                for name, value in (event.get("key") or {}).items():
                    self.key_values.setdefault(name, []).append(value)
            return
        if kind in UnwatchedReader.KINDS:
            self.unwatched.read(position, event)
        if kind in KEPT:
            self.kept[kind].append(event)
        if "family" in event and kind not in KEPT:
            self.families.add(event["family"])
        if kind == "context" and event["values"].get("target_arch"):
            self.shown_arch = str(event["values"]["target_arch"])  # (as text, as every context value is kept)
        elif kind == "run" and self.run_arch is None:
            arch = event.get("target_arch") or event.get("cute_dsl_arch")
            self.run_arch = str(arch) if arch else None

    @property
    def target_arch(self) -> str | None:
        """The target arch the processes showed: the last context event's, else the first run event's."""
        return self.shown_arch or self.run_arch
