"""Where things lie in a run folder (names only; imported by every observed process, so it imports nothing)."""

import os

TRACE_GLOB = "trace-*.jsonl"
UNOBSERVED_GLOB = "unobserved-*.txt"  # written by bootstrap/sitecustomize.py, which cannot import mlacheck
CAPTURE_CONFIG = "capture.json"


def trace_path(run_dir: str, pid: int) -> str:
    """The trace file of process `pid`."""
    return os.path.join(run_dir, f"trace-{pid}.jsonl")
