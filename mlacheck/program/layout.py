"""Where things lie in a run folder (names only; imported by every observed process, so it imports nothing)."""

import os

ENV_PREFIX = "MLACHECK_"  # every variable of mlacheck's starts with it
ENV_RUN_DIR = "MLACHECK_RUN_DIR"
TRACE_GLOB = "trace-*.jsonl"
UNOBSERVED_GLOB = "unobserved-*.txt"  # also written by bootstrap/sitecustomize.py, which cannot import mlacheck
CAPTURE_CONFIG = "capture.json"
PROCESS_TREE = "processes.json"  # every process the supervisor saw descend from it (program/tree.py)


def trace_path(run_dir: str, pid: int, host: str | None = None) -> str:
    """The trace file of process `pid`; `host` names a process on another host than the run's (a shared folder)."""
    return os.path.join(run_dir, f"trace-{host}-{pid}.jsonl" if host else f"trace-{pid}.jsonl")


def unobserved_path(run_dir: str, pid: int) -> str:
    """The note of a Python process whose agent could not start."""
    return os.path.join(run_dir, f"unobserved-{pid}.txt")


def installed_path(run_dir: str, installation: str) -> str:
    """The answers of the installed distributions that the run's processes share, for one installation
    (capture/installed.py)."""
    return os.path.join(run_dir, f"installed-{installation}.json")
