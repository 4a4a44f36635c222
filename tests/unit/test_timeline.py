"""The compile timeline from events: `t` (seconds since the run event) on compile, serving_start and exit events."""

from __future__ import annotations

import time

from mlacheck.analysis.digest import Digest
from mlacheck.events import run_clock, start_run_clock


def label(family, key):
    return f"({', '.join(f'{k}={v}' for k, v in key.items())})"


def timelines(events: list[dict]) -> list[dict]:
    """The timelines the digest of `events` draws, each compile named by `label`."""
    return Digest.of(events).timeline.finish(label)


def test_compiles_become_bars_from_their_end_and_seconds():
    events = [
        {"type": "run", "pid": 7, "proc": 0},
        {
            "type": "compile",
            "family": "f",
            "vid": 1,
            "key": {"a": 1},
            "phase": "warmup",
            "seconds": 2.0,
            "t": 2.5,
            "proc": 0,
        },
        {
            "type": "compile",
            "family": "f",
            "vid": 9,
            "key": {"a": 9},
            "phase": "preexisting",
            "seconds": None,
            "t": 0.1,
            "proc": 0,
        },
        {"type": "serving_start", "t": 3.0, "proc": 0},
        {
            "type": "compile",
            "family": "f",
            "vid": 2,
            "key": {"a": 2},
            "phase": "serving",
            "seconds": 1.5,
            "t": 5.0,
            "proc": 0,
        },
        {"type": "exit", "t": 6.0, "proc": 0},
        {
            "type": "compile",
            "family": "f",
            "vid": 3,
            "key": {"a": 3},
            "phase": "warmup",
            "seconds": 1.0,
            "proc": 1,
        },  # no t
    ]
    [entry] = timelines(events)
    assert (entry["proc"], entry["pid"], entry["serving_start"], entry["end"]) == (0, 7, 3.0, 6.0)
    assert [(c["label"], c["phase"], c["start"], c["seconds"]) for c in entry["compiles"]] == [
        ("(a=1)", "warmup", 0.5, 2.0),
        ("(a=2)", "serving", 3.5, 1.5),
    ]


def test_the_run_clock_counts_from_the_run_event():
    started = start_run_clock()
    assert abs(started - time.time()) < 1.0 and 0.0 <= run_clock() < 1.0


def test_a_compile_its_process_died_in_is_a_bar_to_the_last_record():
    events = [
        {"type": "run", "pid": 3, "proc": 0},
        {"type": "compile_start", "id": 0, "family": "f", "phase": "warmup", "t": 1.0, "proc": 0},
        {"type": "compile_end", "id": 0, "seconds": 1.0, "outcome": "returned", "t": 2.0, "proc": 0},
        {
            "type": "compile",
            "family": "f",
            "vid": 1,
            "key": {"a": 1},
            "phase": "warmup",
            "seconds": 1.0,
            "origin": "compile",
            "t": 2.0,
            "proc": 0,
        },
        {"type": "compile_start", "id": 1, "family": "f", "key": {"a": 2}, "phase": "serving", "t": 4.0, "proc": 0},
        {"type": "counts", "family": "f", "dispatches": {}, "calls": {}, "final": False, "t": 6.5, "proc": 0},
    ]
    [entry] = timelines(events)
    assert [(c["label"], c["start"], c["seconds"], c["origin"]) for c in entry["compiles"]] == [
        ("(a=1)", 1.0, 1.0, "compile"),
        ("(a=2)", 4.0, 2.5, "unfinished"),
    ]
    assert entry["end"] == 6.5


def test_the_timeline_draws_the_compiles_the_analysis_finds_never_closed():
    """A compile_start whose id came again is not forgotten (the analysis keeps it too), one that raised is closed, a
    record that names its compile closes it, and one that returned awaits its record (no bar of its own)."""
    start = {"type": "compile_start", "family": "f", "phase": "warmup", "proc": 0}
    events = [
        {"type": "run", "pid": 3, "proc": 0},
        {**start, "id": 0, "key": {"a": 1}, "t": 1.0},
        {**start, "id": 0, "key": {"a": 2}, "t": 2.0},  # (the same id again: the first is still open)
        {**start, "id": 1, "key": {"a": 3}, "t": 2.5},
        {"type": "compile_end", "id": 1, "seconds": 0.1, "outcome": "raised", "t": 2.6, "proc": 0},
        {**start, "id": 2, "key": {"a": 4}, "t": 3.0},
        {"type": "compile_end", "id": 2, "seconds": 0.5, "outcome": "returned", "t": 3.5, "proc": 0},
        {**start, "id": 3, "key": {"a": 5}, "t": 4.0},
        {
            "type": "compile",
            "family": "f",
            "vid": 5,
            "key": {"a": 5},
            "phase": "warmup",
            "seconds": 0.5,
            "origin": "compile",
            "start": 3,
            "t": 4.5,
            "proc": 0,
        },  # fmt: skip
        {"type": "exit", "t": 5.0, "proc": 0},
    ]
    [entry] = timelines(events)
    assert [(c["label"], c["start"], c["seconds"], c["origin"]) for c in entry["compiles"]] == [
        ("(a=5)", 4.0, 0.5, "compile"),
        ("(a=2)", 2.0, 3.0, "unfinished"),
        ("(a=1)", 1.0, 4.0, "unfinished"),
    ]
