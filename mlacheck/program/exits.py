"""Where an observed image ends, as the agent hooks it: the interpreter's exit (atexit), told from the program's own
call of `atexit._run_exitfuncs()` mid-run (test fixtures after each test, restart helpers before an exec); a SIGTERM,
SIGHUP or SIGINT of the default action (the process dies by it and skips atexit); and an exec (os.exec*)."""

from __future__ import annotations

import atexit
import functools
import os
import signal
import sys
from collections.abc import Callable

EXEC_FUNCTIONS = ("execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe")
CHAINED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name))
UNREGISTERED = (
    "pid {pid} ran its atexit functions mid-run through atexit's own _run_exitfuncs, past mlacheck's wrapper of it, "
    "which would have registered capture's exit again: its counts from then on and its exit event may be lost"
)


class ExitFunctions:
    """The agent's atexit function (`at_exit`), registered again after each call of the program's of
    `atexit._run_exitfuncs()` (atexit forgets every function registered while it runs them), through a wrapper of it;
    `running`: how deep the program is in that wrapper."""

    def __init__(self, at_exit: Callable[[], None], observing: Callable[[], bool], safely) -> None:
        self.at_exit, self.observing, self.safely = at_exit, observing, safely
        self.running = 0

    def install(self) -> None:
        atexit.register(self.at_exit)
        real = atexit._run_exitfuncs
        if getattr(real, "_mlacheck_atexit", False):
            return

        @functools.wraps(real)
        def run_exitfuncs(*args, **kwargs):
            self.running += 1
            try:
                return real(*args, **kwargs)
            finally:
                self.running -= 1
                if self.observing():  # (not where the interpreter's exit ran it: capture stopped then)
                    self.safely(self._register)

        run_exitfuncs._mlacheck_atexit = True
        atexit._run_exitfuncs = run_exitfuncs

    def _register(self) -> None:
        atexit.unregister(self.at_exit)  # (once, whatever the program did meanwhile)
        atexit.register(self.at_exit)


def exiting(frame) -> bool:
    """Whether atexit runs its functions (`frame`: the agent's atexit function's) because the interpreter exits, not
    because the program called `atexit._run_exitfuncs()`: the exit runs them with no Python frame under them, or (a
    Py_Exit from C, an atexit function that runs them again) in the main thread once threading's shutdown stopped it; a
    call of the program's, in any thread, finds the main thread alive or comes from another thread."""
    if frame.f_back is None or sys.is_finalizing():
        return True
    threading = sys.modules.get("threading")  # (not imported: no shutdown of it ran, the frames tell)
    if threading is None:
        return False
    main = threading.main_thread()
    return main.ident == threading.get_ident() and not main.is_alive()


def chain_signals(on_signal: Callable[[int, object], None]) -> None:
    """SIGTERM, SIGHUP and SIGINT, where their action is the default one, go to `on_signal` first. A signal the program
    handles (Python's own KeyboardInterrupt for SIGINT included) or ignores is left to it, and a handler the program
    installs later replaces this one."""
    for signum in CHAINED_SIGNALS:
        try:
            if signal.getsignal(signum) == signal.SIG_DFL:
                signal.signal(signum, on_signal)
        except (ValueError, OSError):  # not the main thread, or a signal this platform lacks
            pass


def end_by_default(signum: int) -> None:
    """End the process by `signum` with the default action: it dies as it would have, with the same status."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # to the process: a thread that has it unblocked ends it


def hook_exec(hooked: Callable[[str, Callable], Callable]) -> None:
    """Each os.exec* function replaced by `hooked(name, the function)`, once."""
    for name in EXEC_FUNCTIONS:
        real = getattr(os, name, None)
        if real is not None and not getattr(real, "_mlacheck_exec", False):
            setattr(os, name, hooked(name, real))
