"""Work done beside this process, in a forked child, where a second CPU is free: `beside(work)` starts it, `Beside.wait`
says how it ended. A child that ended without saying it finished (killed, out of memory) is an error, never a success;
what went wrong in it is raised here as it was (an MlacheckError with its setting, anything else as an internal
error). No child outlives its parent (PR_SET_PDEATHSIG, Linux) or is left unwaited.

A fork copies the calling thread alone: a process with another thread, or one CPU, does the work itself (`beside`
returns None).
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from collections.abc import Callable

from mlacheck.errors import MlacheckError

PR_SET_PDEATHSIG = 1


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux)
        return os.cpu_count() or 1


def forkable() -> bool:
    """Whether a forked child can work beside this process: a fork copies this thread alone, and a second CPU runs it."""
    return hasattr(os, "fork") and threading.active_count() == 1 and cpus() > 1


def dies_with(parent: int, signum: int) -> Callable[[], None]:
    """What makes a process forked from `parent` get `signum` when `parent` dies (PR_SET_PDEATHSIG, Linux; elsewhere
    nothing), and at once where `parent` died before the signal was set: made in the parent, called in the child."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda: None

    def set_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return set_death_signal


def flush_standard_streams() -> None:
    """stdout and stderr flushed where they are open (a stream closed when the process began is None; one whose reader
    left refuses): what a fork would write twice, or `os._exit` lose."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


class Beside:
    """A forked child doing `what` (its name in an error) beside this process."""

    def __init__(self, pid: int, said: int, what: str) -> None:
        self.pid: int | None = pid
        self.said, self.what = open(said, "rb"), what  # noqa: SIM115 - closed by `wait` or `stop`

    def wait(self, quiet: bool = False) -> None:
        """Wait for the child to end; raise what went wrong in it (`quiet`: say nothing of it). Interrupted while
        waiting, it kills the child (`stop`)."""
        try:
            message = self.said.read()
            os.waitpid(self.pid, 0)
        except BaseException:
            self.stop()
            raise
        self.said.close()
        self.pid = None
        if quiet:
            return
        import pickle  # (here, and in the child: a CLI that forks nothing never imports it)

        try:
            outcome = pickle.loads(message) if message else None  # (our own child's, forked from this process)
        except (pickle.UnpicklingError, EOFError, ValueError):
            outcome = None
        if outcome is None:
            raise MlacheckError(
                f"the process of mlacheck's that wrote {self.what} ended before it finished (killed, or out of "
                f"memory): {self.what} may be cut short; write the report again"
            )
        if outcome[0] == "error":
            raise MlacheckError(*outcome[1:])
        if outcome[0] == "failed":
            raise RuntimeError(f"in the process of mlacheck's that wrote {self.what}: {outcome[1]}")

    def stop(self) -> None:
        """Kill the child where it was not waited for, and wait for it: none is left behind."""
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self.said.close()
        self.pid = None


def beside(work: Callable[[], None], what: str) -> Beside | None:
    """`work` started in a forked child, where one can run beside this process (`forkable`); else None: the caller
    does it itself."""
    if not forkable():
        return None
    flush_standard_streams()  # (nothing buffered here is written twice)
    said, says = os.pipe()
    death_signal = dies_with(os.getpid(), signal.SIGKILL)
    pid = os.fork()
    if pid == 0:  # (never returns)
        os.close(said)
        _child(work, says, death_signal)
    os.close(says)
    return Beside(pid, said, what)


def _child(work: Callable[[], None], says: int, death_signal: Callable[[], None]) -> None:
    """The child: `work`, then how it ended, through the pipe; it ends without running any of the parent's exit
    handlers or flushing its buffers."""
    import pickle

    outcome: tuple = ("failed", "it ended without saying how")
    try:
        gc.disable()  # (a collection would touch, and so copy, every page of the parent's objects)
        death_signal()
        work()
        outcome = ("done",)
    except MlacheckError as exc:
        outcome = ("error", exc.message, exc.setting, _picklable(exc.value))
    except BaseException as exc:  # noqa: BLE001 - raised in the parent, which says it as an internal error
        outcome = ("failed", f"{type(exc).__name__}: {exc}")
    finally:
        try:
            with open(says, "wb") as pipe:
                pipe.write(pickle.dumps(outcome))
        finally:
            os._exit(0)


def _picklable(value: object) -> object:
    import pickle

    try:
        pickle.dumps(value)
        return value
    except Exception:  # noqa: BLE001 - any value an error names: its text will do
        return str(value)
