"""How an observed process ends, beyond what its exit event's `how` says, so that a worker that crashes while the
program's main process exits 0 is cut short as the program would be (program/saved.py): the status it exits with
(what it last gave `sys.exit`, or `os._exit` in a forked child; 1 after an exception nothing caught), and a fatal
signal that kills it (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL), which Python's faulthandler, enabled where the program
has not enabled it, writes into the note beside the trace (`FATAL` begins its line).

Observing only: the program's `sys.exit` and `os._exit` do what they did, and a fatal signal still kills the process
with the same status (faulthandler re-raises it). A SystemExit the program catches and goes on from still counts (a
run judged incomplete, never a false pass). The faulthandler's descriptor is moved high (FAR), where a program that
closes its descriptors and opens files of its own does not get its number back soon; a program that enables or
disables faulthandler itself takes it over (its calls pass through, noted)."""

from __future__ import annotations

import faulthandler
import fcntl
import os
import sys
from collections.abc import Callable

FATAL = "Fatal Python error: "  # how faulthandler begins its report of a fatal signal
FAR = 1000  # the lowest descriptor number the faulthandler's is moved to


class Ending:
    """What this process says of its end: `code` (None where it exits 0, or where it is not known)."""

    def __init__(self) -> None:
        self.status: object = None  # what sys.exit was last given
        self._real_exit = sys.exit
        self._ours = False  # whether faulthandler is ours (the program has not enabled nor disabled it)
        self._fd = -1  # the descriptor it writes to, where it is ours
        self._enable, self._disable = faulthandler.enable, faulthandler.disable

    def start(self, note: str) -> None:
        """Watch `sys.exit`, and fatal signals where the program does not (their report goes into `note`)."""
        real = self._real_exit

        def exit(status: object = None) -> None:  # noqa: A001 - the program's sys.exit, as it was
            self.status = status
            real(status)

        exit.__doc__, exit.__wrapped__ = real.__doc__, real  # type: ignore[attr-defined]
        sys.exit = exit
        if not faulthandler.is_enabled():  # (else the program's own: PYTHONFAULTHANDLER, -X faulthandler)
            for name, real_call in (("enable", self._enable), ("disable", self._disable)):
                setattr(faulthandler, name, self._taken(real_call))
            self._ours = True
            self.watch(note)

    def _taken(self, real: Callable) -> Callable:
        def call(*args, **kwargs):
            self._ours = False  # the program's from now (our descriptor stays open: faulthandler may still hold it)
            return real(*args, **kwargs)

        call.__doc__, call.__wrapped__ = real.__doc__, real  # type: ignore[attr-defined]
        return call

    def watch(self, note: str) -> None:
        """Fatal signals reported into `note` (where a forked child's are: its own note), while faulthandler is
        ours."""
        if not self._ours:
            return
        mine, self._fd = self._fd, -1
        try:
            fd = os.open(note, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            self._disable()
            return
        try:
            self._fd = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, FAR)
            os.close(fd)
        except OSError:
            self._fd = fd  # (fewer descriptors allowed than FAR)
        self._enable(file=self._fd)
        if mine >= 0:
            os.close(mine)

    def code(self) -> int | None:
        """The status the process exits with where it is not 0: what sys.exit was given (its text: 1), or 1 after an
        exception nothing caught but a KeyboardInterrupt (Python printed it: `sys.last_value`; it ends the process by
        SIGINT, a stop)."""
        if self.status is not None:
            return (self.status if isinstance(self.status, int) else 1) or None
        raised = getattr(sys, "last_value", None)
        return 1 if raised is not None and not isinstance(raised, KeyboardInterrupt) else None  # (that one: SIGINT)

    def stop(self) -> int | None:
        """`sys.exit` given back (where it is still ours; fatal signals stay watched to the process's end); `code`."""
        if getattr(sys.exit, "__wrapped__", None) is self._real_exit:
            sys.exit = self._real_exit
        return self.code()


def fork_exit(stop: Callable[[int], None]) -> None:
    """In a forked child: `os._exit` first calls `stop(code)` (multiprocessing's fork children leave this way, past
    atexit), then exits as it would have."""
    real_exit = os._exit

    def _exit(code: int) -> None:
        stop(code)
        real_exit(code)

    os._exit = _exit
