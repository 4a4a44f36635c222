"""A net by process under every native build: a compiler or build program (a rule file's `[[compiler_process]]`:
ninja, make, g++, nvcc, ...) that an observed process starts, whatever Python code started it (a library's copy of a
builder that no compile net finds, a fork that renamed a netted function, a plugin run by path).

A process started outside every compile (no compile net's or watched family's compile runs in the starting thread:
`compile_timer.watching`, so a netted build's own ninja is its net's; no function of the entry's `within` is on the
stack, so a Triton compile's ptxas is the Triton capture's) is an unwatched compile of that command: one
`unwatched_compile` event when it starts (a start alone is enough: MLA007 on the serving path), its phase decided as a
compile net's (`phase.decide`: unknown before serving start under no warm-up frame), its `child` the process's pid; the
analysis reads its seconds from the reap of it, where one was seen.

A program is an entry's where its name (a path's last part) matches one of the entry's `programs`, shell-style patterns
(`g++`, `*-g++` for a target's x86_64-linux-gnu-g++, `g++-[0-9]*` for g++-12). A shell's -c command line
(`subprocess` shell=True, os.popen, os.system: `sh -c LINE`) runs each of its commands: one of them that is a
compiler's makes the shell that compiler's process. A launcher's entry (`launches`: ccache, sccache, distcc) is the
entry of the command it runs where that is another entry's, else its own. What compiles nothing: a command of the
entry's `asks` arguments alone (`g++ --version`, `gcc -print-file-name=libc.so`: an ask ending in * is a prefix), and
a driver's (`preprocesses`) command that only preprocesses (-E, or -M/-MM without -c/-MD/-MMD)."""

from __future__ import annotations

import fnmatch
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
PREPROCESS_ONLY = frozenset({"-E"})  # a driver's argument that stops it after preprocessing
DEPENDENCIES = frozenset({"-M", "-MM"})  # ... and those that do unless it also compiles:
COMPILES_TOO = frozenset({"-c", "-MD", "-MMD"})

ShellReader = Callable[[list[str]], "list[list[str]] | None"]  # a shell's command line's commands (shells.py)


def entries_of(config: list[dict]) -> list[plain.CompilerProcess]:
    """The `[[compiler_process]]` entries of capture.json's plain form (read once a process: `started` takes them)."""
    return [plain.compiler_process(data) for data in config]


def started(
    event: dict,
    entries: list[plain.CompilerProcess],
    sink: EventSink,
    phases: Callable[[], tuple[PhaseRule, ...]],
    serving: bool,
    shell: ShellReader,
) -> None:
    """A process started (`event`: a `spawn`, this image's `exec`, or an os.system's shell, its `child` unknown):
    where it runs a compiler process outside every compile, its `unwatched_compile` (`phases()`: the engine frames;
    `serving`: whether the process marked serving start; `shell`: the reader of a shell's command line)."""
    argv, path = event.get("argv") or [], event.get("path") or ""
    found = _entry(path, argv, entries, shell)
    if found is None or compile_timer.watching():
        return
    entry, program = found
    frame = sys._getframe(1)
    if _within(frame, entry.within):
        return
    where = StackReader(frozenset(), phases(), STARTERS).read(frame)
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


def _entry(
    path: str, argv: list[str], entries: list[plain.CompilerProcess], shell: ShellReader
) -> tuple[plain.CompilerProcess, str] | None:
    """(the entry, the name of the program of it that runs) of the program `path` (or the command's first word), or of
    the first of a shell's command line's commands that is an entry's, unless the command compiles nothing (the
    module's docstring)."""
    argv = argv or [path]
    commands = shell([path or argv[0], *argv[1:]])
    if commands is not None:
        found = (_entry(words[0], words, entries, shell) for words in commands)
        return next((entry for entry in found if entry is not None), None)
    names = {os.path.basename(path), os.path.basename(argv[0]) if argv else ""}
    entry = _named(names, entries)
    if entry is None or _asks(entry, argv[1:]) or (entry.preprocesses and _preprocesses(argv[1:])):
        return None
    if entry.launches:
        return _launched(entry, argv, entries, shell)
    return entry, os.path.basename(argv[0])


def _named(names: set[str], entries: list[plain.CompilerProcess]) -> plain.CompilerProcess | None:
    """The first entry one of whose `programs` patterns matches one of `names`."""
    for entry in entries:
        if any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in entry.programs):
            return entry
    return None


def _asks(entry: plain.CompilerProcess, arguments: list[str]) -> bool:
    """Whether `arguments` are the entry's asks alone (a pattern: --version, -print-*)."""
    return bool(arguments) and all(
        any(fnmatch.fnmatchcase(argument, ask) for ask in entry.asks) for argument in arguments
    )


def _preprocesses(arguments: list[str]) -> bool:
    """Whether a driver's `arguments` only preprocess: -E, or -M/-MM without what compiles too."""
    given = set(arguments)
    return bool(given & PREPROCESS_ONLY) or bool(given & DEPENDENCIES and not given & COMPILES_TOO)


def _launched(
    launcher: plain.CompilerProcess, argv: list[str], entries: list[plain.CompilerProcess], shell: ShellReader
) -> tuple[plain.CompilerProcess, str] | None:
    """A launcher's command (ccache g++ -c ...): the entry of the command it runs (its first argument not an option)
    where that is another entry's program, else its own."""
    arguments = argv[1:]
    command = next((at for at, argument in enumerate(arguments) if not argument.startswith("-")), None)
    if command is None or _named({os.path.basename(arguments[command])}, entries) in (None, launcher):
        return launcher, os.path.basename(argv[0])
    return _entry(arguments[command], arguments[command:], entries, shell)


def _within(frame, functions: tuple[str, ...] | list[str]) -> bool:
    """Whether one of `functions` (MODULE:QUALNAME) is on the stack from `frame` outward."""
    wanted = {qualnames.split(function) for function in functions}
    while wanted and frame is not None:
        code = frame.f_code
        if (frame.f_globals.get("__name__"), getattr(code, "co_qualname", code.co_name)) in wanted:
            return True
        frame = frame.f_back
    return False
