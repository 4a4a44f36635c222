"""The files of a large report written side by side: each in a process of its own forked from the report's (the report
is shared copy-on-write, nothing is sent), while this process goes on (the terminal's report, the document for
stdout). Every writer is awaited; one that failed, or was killed, fails the command as a failed write here does (exit
code 2, its path named), never silently. A writer dies with this process (PR_SET_PDEATHSIG, Linux), so none is left.

Where forking is unsafe or unknown (no fork, other threads alive, a path that is not a file of its own), or the report
is small, the caller writes each file in turn as before: the same bytes either way.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from mlacheck.errors import SETTING, MlacheckError

BESIDE = 20_000  # the variants and findings from which each file of a report is written in a process of its own
PR_SET_PDEATHSIG = 1


def worth_forking(report: dict, paths: list[Path]) -> bool:
    """Whether the files at `paths` are written side by side: a large report, more than one file, each a file of its
    own (a regular file or none yet, no two the same), and this process may fork (no other thread alive)."""
    size = len(report.get("findings") or []) + sum(len(f.get("variants") or []) for f in report.get("families") or [])
    if size < BESIDE or len(paths) < 2 or not hasattr(os, "fork") or threading.active_count() > 1:
        return False
    try:
        resolved = {path.resolve() for path in paths}
        regular = all(not path.exists() or stat.S_ISREG(path.stat().st_mode) for path in paths)
    except (OSError, RuntimeError):
        return False
    return regular and len(resolved) == len(paths)


class Writer:
    """A file written by a forked process: `wait` for its end, which raises what writing it here would have."""

    def __init__(self, write: Callable[[], None], fmt: str, path: Path) -> None:
        self.fmt, self.path = fmt, path
        read_end, write_end = os.pipe()
        parent = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:  # the writer
            os.close(read_end)
            _written(write, write_end, parent)
        os.close(write_end)
        self.said = os.fdopen(read_end, "rb")

    def wait(self) -> None:
        """Await the writer; its error (or its death by a signal) raised here, as if the file had been written here."""
        with self.said:
            said = self.said.read()  # (to its end: the writer's exit closes it)
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            name = signal.Signals(os.WTERMSIG(status)).name
            self._failed(f"its writer process was killed ({name}) before it finished")
        told = json.loads(said) if said else {}
        if "error" in told:
            raise MlacheckError(told["error"], told.get("setting"), told.get("value"))
        if "bug" in told:
            raise RuntimeError(f"the {self.fmt} writer process failed: {told['bug']}")
        if os.waitstatus_to_exitcode(status) != 0:
            self._failed(f"its writer process exited {os.waitstatus_to_exitcode(status)} before it finished")

    def stop(self) -> None:
        """End the writer now (this command is interrupted) and reap it."""
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        self.said.close()

    def _failed(self, why: str) -> None:
        raise MlacheckError(f"{SETTING}: cannot write {self.path}: {why}", "output", f"{self.fmt}:{self.path}")


def await_all(writers: list[Writer]) -> None:
    """Await every writer (each one, even after one failed); raise the first failure in the given order. Interrupted,
    every writer not ended yet is ended first."""
    failure: BaseException | None = None
    try:
        for writer in writers:
            try:
                writer.wait()
            except (MlacheckError, RuntimeError) as exc:
                failure = failure or exc
    except BaseException:
        for writer in writers:
            writer.stop()
        raise
    if failure is not None:
        raise failure


def _written(write: Callable[[], None], told: int, parent: int) -> None:
    """In the writer: write, tell the parent what went wrong (if anything), and end without the parent's teardown."""
    said: dict = {}
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # (Ctrl-C ends it with its parent)
        _dies_with(parent)
        write()
    except MlacheckError as exc:
        value = exc.value if exc.value is None or isinstance(exc.value, (str, int)) else str(exc.value)
        said = {"error": exc.message, "setting": exc.setting, "value": value}
    except BaseException as exc:  # noqa: BLE001 - a bug in a renderer: told to the parent, which raises it
        said = {"bug": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
    try:
        os.write(told, json.dumps(said).encode())
    finally:
        os._exit(1 if said else 0)


def _dies_with(parent: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the signal was set
        os._exit(1)
