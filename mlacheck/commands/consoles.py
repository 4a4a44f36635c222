"""Where the CLI prints: rich's console (a CI log or a file read at LOG_WIDTH), a line written without loading rich
where no terminal shows it (a program's run then starts before rich is imported: issue 29), and the progress display."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

LOG_WIDTH = 120
"""The report's width where it goes to a CI log or a file (no terminal, no COLUMNS): logs are read wide."""


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    made = Console(stderr=stderr, emoji=False, highlight=False)
    if not made.is_terminal and "COLUMNS" not in os.environ:
        made.width = LOG_WIDTH
    made.on_broken_pipe = lambda: _reader_gone(made.file, made)
    return made


def _reader_gone(stream, shown: Console | None = None) -> None:
    """A stream whose reader left (`mlacheck report | head`): nothing more is shown on it (it is pointed at /dev/null),
    and the run goes on, its files written, its exit code the verdict's. (rich's own handling exits 1 before any file
    is written, and points stdout at /dev/null whichever stream broke: a document on stdout would be lost.)"""
    if shown is not None:
        shown.quiet = True
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no descriptor (a stream in memory): nothing to point elsewhere
        pass


def no_terminal(stream) -> bool:
    """Whether rich's console would surely find `stream` no terminal: it is no tty, and neither TTY_COMPATIBLE nor
    FORCE_COLOR says otherwise."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return False
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):
        return False


def say(text: str, stderr: bool = False) -> None:
    """One line, whole (never wrapped), as rich's console prints it: without loading rich where the stream is no
    terminal and the line plain ASCII."""
    stream = sys.stderr if stderr else sys.stdout
    if text.isascii() and text.isprintable() and no_terminal(stream):
        try:
            stream.write(text + "\n")
            stream.flush()
        except BrokenPipeError:
            _reader_gone(stream)
    else:
        console(stderr).print(text, markup=False, soft_wrap=True)


class _NoProgress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        pass


def progress(detail: str, live: bool):
    """The progress display on stderr (a live one for the scenario, log lines for a program's run), only where
    stderr is a terminal and not with --quiet."""
    if detail == "quiet" or no_terminal(sys.stderr):
        return _NoProgress()
    shown = console(stderr=True)
    if not shown.is_terminal:
        return _NoProgress()
    from mlacheck.commands.progress import LiveProgress, LogProgress

    return LiveProgress(shown) if live else LogProgress(shown)
