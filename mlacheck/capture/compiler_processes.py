"""A net by process under every native build: a compiler or build program (a rule file's `[[compiler_process]]`:
ninja, make, g++, nvcc, ...) that an observed process starts, whatever Python code started it (a library's copy of a
builder that no compile net finds, a fork that renamed a netted function, a plugin run by path).

A process started outside every compile (no compile net's or watched family's compile runs in the starting thread:
`compile_timer.watching`, so a netted build's own ninja is its net's; no function of the entry's `within` is on the
stack, so a Triton compile's ptxas is the Triton capture's) is an unwatched compile of that command: one
`unwatched_compile` event when it starts (a start alone is enough: MLA007 on the serving path), its phase decided as a
compile net's (`phase.decide`: unknown before serving start under no warm-up frame), its `child` the process's pid; the
analysis reads its seconds from the reap of it, where one was seen. A command of the entry's `asks` arguments alone
(`g++ --version`) compiles nothing."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from mlacheck import events, qualnames
from mlacheck.capture import compile_timer, phase
from mlacheck.capture.stack import StackReader
from mlacheck.rulefiles import plain
from mlacheck.rulefiles.plain import PhaseRule
from mlacheck.sinks import EventSink

STARTERS = ("subprocess", "os", "multiprocessing", "concurrent", "asyncio")  # never a compiler process's site
COMMAND_TEXT = 400  # characters of a command line kept as its key


def started(
    event: dict, entries: list[dict], sink: EventSink, phases: Callable[[], tuple[PhaseRule, ...]], serving: bool
) -> None:
    """A process started (`event`: a `spawn`, or this image's `exec`): where it runs a compiler process outside every
    compile, its `unwatched_compile` (`phases()`: the engine frames; `serving`: whether the process marked serving
    start)."""
    argv, path = event.get("argv") or [], event.get("path") or ""
    entry = _entry(path, argv, [plain.compiler_process(data) for data in entries])
    if entry is None or compile_timer.watching():
        return
    frame = sys._getframe(1)
    if _within(frame, entry.within):
        return
    where = StackReader(frozenset(), phases(), STARTERS).read(frame)
    program = os.path.basename(argv[0] if argv else path)
    sink.write(
        events.unwatched_compile_event(
            entry.label,
            program,
            {"command": " ".join(argv)[:COMMAND_TEXT] or path},
            None,
            phase.decide(where.phase, serving, None),
            where.site,
            where.stack,
            child=event.get("child"),
        )
    )


def _entry(path: str, argv: list[str], entries: list[plain.CompilerProcess]) -> plain.CompilerProcess | None:
    """The entry whose program `path` (or the command's first word) runs, unless the command only asks (`--version`)."""
    names = {os.path.basename(path), os.path.basename(argv[0]) if argv else ""}
    for entry in entries:
        if names & set(entry.programs):
            asks = argv[1:] and all(argument in entry.asks for argument in argv[1:])
            return None if asks else entry
    return None


def _within(frame, functions: tuple[str, ...] | list[str]) -> bool:
    """Whether one of `functions` (MODULE:QUALNAME) is on the stack from `frame` outward."""
    wanted = {qualnames.split(function) for function in functions}
    while wanted and frame is not None:
        code = frame.f_code
        if (frame.f_globals.get("__name__"), getattr(code, "co_qualname", code.co_name)) in wanted:
            return True
        frame = frame.f_back
    return False
