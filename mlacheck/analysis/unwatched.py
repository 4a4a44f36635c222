"""What the watched families do not cover: caches whose installed layout no rule describes, compiles that no
watched family accounts for (a compile net's `unwatched_compile` events, and a compiler process's: its seconds from
the reap of it, where one was seen), and a Triton run interpreted.

An unwatched layout is one line of what was not checked; a dispatch through it makes the run incomplete. An
unwatched compile on the serving path is MLA007 (`checks/`); one whose phase is unknown (`capture.phase`: before any
serving start, under no warm-up frame) in a process that never marked serving start makes the run incomplete; the
others are listed.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlacheck.capture.phase import HOW_TO_MARK, UNKNOWN, settled
from mlacheck.capture.triton.runtime import INTERPRETED


class UnwatchedReader:
    """What no watched family covers, event by event (`read`, with its position): the caches whose layout no rule
    describes, the calls through them, the compiles of the compile nets (phases settled by `marks`: per process, the
    position of its first serving-start mark) and each process's pid."""

    KINDS = frozenset(("unwatched", "unwatched_dispatch", "run", "unwatched_compile", "reaped"))  # the events it reads

    def __init__(self, marks: dict[int | None, int]) -> None:
        self.marks = marks
        self.layouts: dict[tuple, dict] = {}
        self.called: dict[tuple, str | None] = {}
        self.compiles: list[UnwatchedCompile] = []
        self.pids: dict[int | None, int | None] = {}
        self.running: dict[tuple, tuple[UnwatchedCompile, float]] = {}  # (proc, pid) of a compiler process -> it, its t

    def read(self, position: int, e: dict) -> None:
        kind = e["type"]
        if kind == "unwatched":
            self.layouts.setdefault((e["module"], e["cache"], e["provider"]), e)
        elif kind == "unwatched_dispatch":
            self.called[(e["module"], e["function"])] = e.get("site")
        elif kind == "run":
            self.pids[e.get("proc")] = e.get("pid")
        elif kind == "reaped":
            self._reaped(e)
        elif kind == "unwatched_compile":
            proc = e.get("proc")
            before_mark = proc in self.marks and position < self.marks[proc]
            self.compiles.append(
                UnwatchedCompile(
                    e["net"],
                    e["kernel"],
                    dict(e.get("key") or {}),
                    e.get("seconds"),
                    settled(e["phase"], before_mark),
                    e.get("site"),
                    list(e.get("stack") or []),
                    proc,
                    e.get("raised") if type(e.get("raised")) is str else None,
                )
            )
            if type(e.get("child")) is int and isinstance(e.get("t"), (int, float)):
                self.running[(proc, e["child"])] = (self.compiles[-1], e["t"])

    def _reaped(self, e: dict) -> None:
        """A compiler process's end, reaped by the process that started it: its seconds."""
        started = self.running.pop((e.get("proc"), e["pid"]), None)
        if started is not None and isinstance(e.get("t"), (int, float)):
            started[0].seconds = round(max(0.0, e["t"] - started[1]), 3)

    def unwatched_layouts(self) -> tuple[list[str], list[str]]:
        """(one not-checked line per unwatched cache, one incomplete reason per unwatched dispatch function)."""
        not_checked = [
            f"{module}.{cache}: not watched: installed {provider}, and no loaded rule describes it "
            f"({'; '.join(event.get('reasons') or [])}); `mlacheck rules --template {module}` writes a starting rule"
            for (module, cache, provider), event in self.layouts.items()
        ]
        incomplete = [
            f"{module}: {function} was called (first at {site}), but no loaded rule describes the installed code: "
            "its variants were not checked"
            for (module, function), site in self.called.items()
        ]
        return not_checked, incomplete

    def unwatched_compiles(self) -> tuple[list[UnwatchedCompile], list[str]]:
        """Every unwatched compile (those on the serving path are MLA007: `checks/`), and an incomplete reason per
        kernel and process whose compiles no phase could be told of. A compile made before its process marked serving
        start (the mark came later) was warm-up."""
        return self.compiles, _unknown(self.compiles, self.pids)


def interpreted_tritons(contexts: dict[int | None, dict[str, str]]) -> list[str]:
    """One not-checked line per Triton that a process ran interpreted (its context says `MODULE: interpreted`):
    its kernels compile nothing, so they have no compile to check."""
    modules = sorted({name for context in contexts.values() for name, value in context.items() if value == INTERPRETED})
    return [
        f"{module}: the program ran its Triton kernels interpreted (TRITON_INTERPRET=1): they compile nothing, so "
        "there is no compile to check; run it without TRITON_INTERPRET (with --dry on a CPU) to check their keys"
        for module in modules
    ]


@dataclass
class UnwatchedCompile:
    """One compile no watched family accounted for."""

    net: str
    kernel: str
    key: dict
    seconds: float | None
    phase: str
    site: str | None
    stack: list[str]
    proc: int | None
    raised: str | None = None  # the type of the error the compile raised (the caller waited for it all the same)


def _unknown(compiles: list[UnwatchedCompile], pids: dict[int | None, int | None]) -> list[str]:
    unknown: dict[tuple, list[UnwatchedCompile]] = {}
    for compiled in compiles:
        if compiled.phase == UNKNOWN:
            unknown.setdefault((compiled.net, compiled.kernel, compiled.proc), []).append(compiled)
    return [
        f"{net}: {len(found)} compile(s) of {kernel} in pid {pids.get(proc, '?')} (first at {found[0].site}) came "
        "under no warm-up frame in a process that never marked serving start, so nothing tells warm-up from a "
        f"serving-path compile: {HOW_TO_MARK}"
        for (net, kernel, proc), found in unknown.items()
    ]
