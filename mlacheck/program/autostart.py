"""Joining a run at interpreter start (mlacheck_startup.start, called by mlacheck-startup.pth, found the run this
process belongs to): start the capture agent, or say why not.

A process whose agent cannot start runs on, unobserved, and says so on stderr and in the run folder (the report then
cannot pass). A run folder that this user does not own alone is not joined, and nothing is written into it: the
process says why in one line on stderr.
"""

from __future__ import annotations

import os
import sys

from mlacheck.program.layout import unobserved_path
from mlacheck.program.trust import UntrustedFolder, write_note


def join(run_dir: str, found_by: str) -> None:
    """Start this process's agent for the run in `run_dir`; never raises into the interpreter's start."""
    try:
        from mlacheck.program.agent import start_agent

        start_agent(run_dir, found_by)
    except UntrustedFolder as exc:
        _say(f"capture is off in process pid {os.getpid()}: {exc}")
    except Exception as exc:  # noqa: BLE001 - the program runs on, unobserved
        note_unobserved(run_dir, exc)


def note_unobserved(run_dir: str | None, exc: BaseException) -> None:
    """Say on stderr, and in the run folder where there is one, that this process runs unobserved, and why."""
    line = f"pid {os.getpid()} ({sys.executable}): {type(exc).__name__}: {exc}"
    _say(f"capture is off in process {line}")
    if run_dir:
        write_note(unobserved_path(run_dir, os.getpid()), line + "\n")


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"mlacheck: {line}\n")
    except Exception:  # noqa: BLE001 - the interpreter's stderr may be closed
        pass
