"""The start path of mlacheck-startup.pth, installed with mlacheck: start the capture agent at interpreter start in
a process that belongs to an mlacheck run, whatever its PYTHONPATH.

A process belongs to the run of its nearest registered ancestor (registry.py: found through /proc, so a worker
started with a cleared environment is found too), else to the run MLACHECK_RUN_DIR names (a process the run did
not start, e.g. a worker of a Ray cluster started outside the run, given the variable in its runtime_env). The
ancestor comes first: a variable copied over from another node's run does not take a process from its own node's
run. A process whose agent cannot start runs on, unobserved, and says so in the run folder (the report then
cannot pass). The .pth calls `start` only where MLACHECK_RUN_DIR is set or a run is registered on the machine.
"""

from __future__ import annotations

import os
import sys

from mlacheck.program import registry
from mlacheck.program.layout import ENV_RUN_DIR, unobserved_path

_tried = False


def start() -> None:
    """Start the agent if this process belongs to a run, once (a venv's lib64 link to lib has `site` read the .pth
    twice); never raises into the interpreter's start."""
    global _tried
    if _tried:
        return
    _tried = True
    run_dir = None
    try:
        run_dir, found_by = registry.find_run(), "registry"
        if run_dir is None:
            run_dir, found_by = os.environ.get(ENV_RUN_DIR), "environment"
        if run_dir:
            from mlacheck.program.agent import start_agent

            start_agent(run_dir, found_by)
    except Exception as exc:  # noqa: BLE001 - the program runs on, unobserved
        note_unobserved(run_dir, exc)


def note_unobserved(run_dir: str | None, exc: BaseException) -> None:
    """Say on stderr, and in the run folder where there is one, that this process runs unobserved, and why."""
    line = f"pid {os.getpid()} ({sys.executable}): {type(exc).__name__}: {exc}"
    sys.stderr.write(f"mlacheck: capture is off in process {line}\n")
    if run_dir:
        try:
            with open(unobserved_path(run_dir, os.getpid()), "w", encoding="utf-8") as note:
                note.write(line + "\n")
        except OSError:
            pass
