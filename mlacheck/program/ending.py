"""How an observed process ends, beyond what its exit event's `how` says, so that a worker that crashes or exits with
a status other than 0 while the program's main process exits 0 is cut short as the program would be
(program/ends.py). The compiled `_ending` (built with the package where a C compiler and glibc were there) writes it
into the last line of the note beside the trace (`sinks.END_SLOT`), where no Python runs any more: the status exit()
is given (sys.exit, raise SystemExit, an exception nothing caught, the program's end; `exit N`), and a signal whose
default action kills (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGQUIT, SIGUSR1, SIGALRM, ...; `signal N`), each
with the image's start. What Python code sees does not change: no Python function is replaced (an os._exit in a
forked child, which the agent already hooks, is said as it happens), `signal.getsignal` still says the default action,
a signal still kills with the same status, and a handler the program installs replaces it (docs/program-mode.md says
what C code sees, and what is not told). Without the compiled module nothing is written, and a worker's end is told
as before: by its exit event alone."""

from __future__ import annotations

import os
from collections.abc import Callable

from mlacheck.events import lost_note_path, run_started
from mlacheck.sinks import NOTE_SIZE, JsonlSink

try:
    from mlacheck.program import _ending
except ImportError:  # (no C compiler, or no glibc, where it was installed)
    _ending = None


def watch(sink: JsonlSink) -> None:
    """How this process's image ends, said in the note beside `sink`'s trace, which a clean end then takes away
    (`JsonlSink.leave_note`)."""
    sink.leave_note = arm(lost_note_path(sink.path), run_started())


def arm(note: str, started: float) -> bool:
    """Watch how this process's image (started at `started`) ends, into `note` (a forked child's own: its parent's is
    let go of); False where the compiled module is not there or the note cannot be opened."""
    if _ending is None:
        return False
    try:
        fd = os.open(note, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        _ending.arm(fd, NOTE_SIZE, repr(started), note)
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)
    return True


def fork_exit(stop: Callable[[], None]) -> None:
    """In a forked child: `os._exit` first calls `stop` (multiprocessing's fork children leave this way, past atexit)
    and says its status, then exits as it would have."""
    real_exit = os._exit

    def _exit(code: int) -> None:
        stop()
        if _ending is not None:
            _ending.exited(code)
        real_exit(code)

    os._exit = _exit
