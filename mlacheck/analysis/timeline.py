"""The compile timeline of each process: when each variant compiled and for how long (in the phase the analysis
judges: a serving compile before the process's later serving mark was warm-up), when serving started, the steps of
its engine's step function that were far slower than usual (`slow_step`), when the process ended (seconds since its
run event, the events' `t`; `started`, the run event's wall clock, lines processes up). The HTML report draws it.

A compile event without `t` (a trace of an older mlacheck) leaves its compile out; a process with no timed
compile has no timeline. A compile that began and never ended (a `compile_start` with no `compile_end` and no record
that names it: its process died in it, or exited while it ran) is a bar from its start to the process's last recorded
moment, origin "unfinished". A serving launch's wait for an async compile begun before it is a bar of its own, origin
"wait" (a warm-up launch's wait is not: its compile's bar covers it).
"""

from __future__ import annotations

from collections.abc import Callable

from mlacheck.analysis.tables import TablesReader
from mlacheck.capture import phase as phases
from mlacheck.keys import Key


class TimelineReader:
    """The timelines event by event (`EVENTS`: what each kind of event adds to its process's entry): one entry per
    process that compiled with times or had a slow step, {"proc", "pid", "rank", "started", "end", "serving_start",
    "compiles": [{"family", "label", "phase", "start", "seconds", "origin"}], "steps": [{"function", "start",
    "seconds", "usual", "serving"}]}. `marked`: the processes that marked serving start (a compile before their mark
    was warm-up); `tables`: the variant tables' reader, given each event before this one (each process's last moment,
    and the compiles never closed: `Brackets`). Each compile's label is made at the end (`finish`), from its key."""

    def __init__(self, marked, tables: TablesReader) -> None:
        self.by_proc: dict[object, dict] = {}
        self.marked = marked
        self.tables = tables

    def take(self, event: dict, kind: str, proc: object, t: object) -> None:
        """Read an event whose kind, process and time (its "type", "proc" and "t") were looked up once (the digest
        reads each event so)."""
        entry = self.by_proc.get(proc)
        if entry is None:
            entry = self.by_proc[proc] = {
                "proc": proc,
                "pid": None,
                "started": None,
                "end": None,
                "serving_start": None,
                "compiles": [],
                "steps": [],
            }
        if kind in EVENTS:
            EVENTS[kind](self, entry, event, t)

    def finish(self, label: Callable[[str, Key], str]) -> list[dict]:
        """Each compile its process died (or exited) in as a bar to its last moment (never before a mark), and the
        entries of the processes with a compile or a slow step, each ending at its last span; `label(family, key)`
        names each variant."""
        for entry in self.by_proc.values():
            entry["compiles"] = [
                {
                    "family": family,
                    "label": label(family, key),
                    "phase": phase,
                    "start": start,
                    "seconds": s,
                    "origin": o,
                }
                for family, key, phase, start, s, o in entry["compiles"]
            ]
        last = self.tables.last_t
        for proc, (_, start, end) in self.tables.brackets.left():
            if end is not None or start.get("t") is None:  # (one that returned is drawn by its record, if it came)
                continue
            family = start.get("family") or f"unwatched:{start.get('kernel')}"
            self.by_proc[proc]["compiles"].append(
                {
                    "family": family,
                    "label": label(family, start.get("key") or {}),
                    "phase": start.get("phase"),
                    "start": start["t"],
                    "seconds": round(last[proc] - start["t"], 3),
                    "origin": "unfinished",
                }
            )
        return [_ended(entry) for entry in self.by_proc.values() if entry["compiles"] or entry["steps"]]


def _ended(entry: dict) -> dict:
    """The entry, its end the latest of its exit, its last compile or step, and its serving start."""
    spans = [(c["start"], c["seconds"]) for c in entry["compiles"]] + [
        (s["start"], s["seconds"]) for s in entry["steps"]
    ]
    last = max(start + (seconds or 0.0) for start, seconds in spans)
    entry["end"] = max(entry["end"] or 0.0, last, entry["serving_start"] or 0.0)
    return entry


def _ran(drawn: TimelineReader, entry: dict, event: dict, t: float | None) -> None:
    entry["pid"], entry["rank"], entry["started"] = event.get("pid"), event.get("rank"), event.get("started")


def _compiled(drawn: TimelineReader, entry: dict, event: dict, t: float | None) -> None:
    """A compile with its time, in the phase the analysis judges (before the process's later mark: warm-up)."""
    if t is None or event.get("phase") in phases.NOT_COMPILED_HERE:
        return
    before_mark = entry["proc"] in drawn.marked and entry["serving_start"] is None
    seconds, phase = event.get("seconds"), phases.settled(event.get("phase") or phases.UNKNOWN, before_mark)
    if event.get("origin") == "wait" and phase != phases.SERVING:  # a warm-up launch's wait: its compile's bar shows it
        return
    entry["compiles"].append(  # (its key, until `finish` names it: family, key, phase, start, seconds, origin)
        (
            event["family"],
            event.get("key") or {},
            phase,
            round(max(0.0, t - (seconds or 0.0)), 3),
            seconds,
            event.get("origin"),
        )
    )


def _slow_step(drawn: TimelineReader, entry: dict, event: dict, t: float | None) -> None:
    entry["steps"].append(
        {name: event.get(name) for name in ("function", "seconds", "usual", "serving")} | {"start": t}
    )


def _exited(drawn: TimelineReader, entry: dict, event: dict, t: float | None) -> None:
    if t is not None:
        entry["end"] = t


def _serving_start(drawn: TimelineReader, entry: dict, event: dict, t: float | None) -> None:
    if t is not None and entry["serving_start"] is None:
        entry["serving_start"] = t


EVENTS = {
    "run": _ran,
    "slow_step": _slow_step,
    "exit": _exited,
    "serving_start": _serving_start,
    "compile": _compiled,
}
