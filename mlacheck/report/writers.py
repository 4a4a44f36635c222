"""The files of a large report written side by side: by processes forked from the report's (the report is shared
copy-on-write, nothing is sent), while this process writes its own share and prints the terminal's report. One
process a CPU this process may run on, at most: each writer copies the pages of the report it reads (their reference
counts), so the memory they take grows with their number. Every writer is awaited; one that failed, or was killed,
fails the command as a failed write here does (exit code 2, the file it had not finished named), never silently. A
writer dies with this process (PR_SET_PDEATHSIG, Linux), so none is left.

Where forking is unsafe or unknown (no fork, other threads alive, a path that is not a file of its own), one CPU, or a
small report, the caller writes each file in turn as before: the same bytes either way.
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

BESIDE = 20_000  # the variants and findings from which the files of a report are written side by side
PR_SET_PDEATHSIG = 1
File = tuple[str, Path]  # (format, path)


def shares(report: dict, files: list[File]) -> list[list[File]]:
    """The files each writer process writes, the last share this process's (none: write them all here in turn): for a
    large report, more than one file, each a file of its own (a regular file or none yet, no two the same), where this
    process may fork (no other thread alive) and runs on more than one CPU."""
    size = len(report.get("findings") or []) + sum(len(f.get("variants") or []) for f in report.get("families") or [])
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if size < BESIDE or len(files) < 2 or cpus < 2 or not hasattr(os, "fork") or threading.active_count() > 1:
        return []
    paths = [path for _, path in files]
    try:
        resolved = {path.resolve() for path in paths}
        regular = all(not path.exists() or stat.S_ISREG(path.stat().st_mode) for path in paths)
    except (OSError, RuntimeError):
        return []
    if not regular or len(resolved) != len(paths):
        return []
    processes = min(cpus, len(files))
    return [files[number::processes] for number in range(processes)]


class Writer:
    """Files written in turn by a forked process: `wait` for its end, which raises what writing them here would
    have."""

    def __init__(self, write: Callable[[str, Path], None], files: list[File]) -> None:
        self.files = files
        read_end, write_end = os.pipe()
        parent = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:  # the writer
            os.close(read_end)
            _written(write, files, write_end, parent)
        os.close(write_end)
        self.said = os.fdopen(read_end, "rb")

    def wait(self) -> None:
        """Await the writer; its error (or its death by a signal) raised here, as if the files had been written
        here."""
        with self.said:
            said = [json.loads(line) for line in self.said.read().splitlines()]  # (to its end: its exit closes it)
        _, status = os.waitpid(self.pid, 0)
        told = said[-1] if said else {}
        if "error" in told:
            raise MlacheckError(told["error"], told.get("setting"), told.get("value"))
        fmt, path = self.files[min(len(said), len(self.files) - 1)]  # (each file written is told)
        if "bug" in told:
            raise RuntimeError(f"the process writing {fmt} failed: {told['bug']}")
        if os.WIFSIGNALED(status):
            why = f"its writer process was killed ({signal.Signals(os.WTERMSIG(status)).name}) before it finished"
        elif os.waitstatus_to_exitcode(status) != 0 or len(said) != len(self.files):
            why = f"its writer process exited {os.waitstatus_to_exitcode(status)} before it finished"
        else:
            return
        raise MlacheckError(f"{SETTING}: cannot write {path}: {why}", "output", f"{fmt}:{path}")

    def stop(self) -> None:
        """End the writer now (this command is interrupted) and reap it."""
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        self.said.close()


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


def _written(write: Callable[[str, Path], None], files: list[File], told: int, parent: int) -> None:
    """In the writer: write each file, telling the parent of each written and of what went wrong (if anything), and
    end without the parent's teardown."""
    said: dict = {}
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # (Ctrl-C ends it with its parent)
        _dies_with(parent)
        for number, (fmt, path) in enumerate(files):
            write(fmt, path)
            os.write(told, json.dumps({"written": number}).encode() + b"\n")
    except MlacheckError as exc:
        value = exc.value if exc.value is None or isinstance(exc.value, (str, int)) else str(exc.value)
        said = {"error": exc.message, "setting": exc.setting, "value": value}
    except BaseException as exc:  # noqa: BLE001 - a bug in a renderer: told to the parent, which raises it
        said = {"bug": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
    try:
        if said:
            os.write(told, json.dumps(said).encode() + b"\n")
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
