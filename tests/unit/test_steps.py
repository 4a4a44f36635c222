"""Engine steps (`program/steps.py`) and who waited for a serving-path compile (`analysis/waits.py`)."""

import pytest
from jsonschema import validate

from mlacheck import schemas
from mlacheck.analysis.waits import waits
from mlacheck.program.steps import MIN_STEPS, SLOW_SECONDS, StepClock


def clock():
    written = []
    return StepClock("engine:Runner.step", written.append, lambda: True), written


def test_a_step_far_over_the_usual_is_written_and_the_usual_ones_are_not():
    steps, written = clock()
    for seconds in (0.01, 0.012, 0.011, 0.01):
        steps.record(1.0, seconds)
    steps.record(2.0, 3.0)
    [event] = written
    assert event["type"] == "slow_step" and event["seconds"] == 3.0 and event["step"] == 4
    assert event["usual"] == pytest.approx(0.0105) and event["t"] == 2.0 and event["serving"] is True
    validate(event, schemas.event_schema("slow_step"))


@pytest.mark.parametrize(
    ("before", "seconds"),
    [
        ((0.01,) * (MIN_STEPS - 1), 5.0),  # too few steps for a usual
        ((0.01,) * 8, SLOW_SECONDS - 0.01),  # short in seconds, however many times the usual
        ((0.3,) * 8, 1.0),  # long, but not far over a slow usual
    ],
)
def test_no_step_is_slow_without_a_usual_to_be_slow_against(before, seconds):
    steps, written = clock()
    for each in before:
        steps.record(0.0, each)
    steps.record(1.0, seconds)
    assert written == []


def test_the_timed_step_function_returns_what_it_returns_raises_what_it_raises_and_is_counted_either_way():
    steps, _ = clock()

    def step(x):
        if x is None:
            raise ValueError("no batch")
        return x * 2

    timed = steps.timed(step)
    assert timed(21) == 42 and timed.__wrapped__ is step and timed.__name__ == "step"
    with pytest.raises(ValueError, match="no batch"):
        timed(None)
    assert steps.steps == 2


def timeline(proc, pid, rank, started, compiles=(), steps=()):
    return {
        "proc": proc,
        "pid": pid,
        "rank": rank,
        "started": started,
        "compiles": list(compiles),
        "steps": list(steps),
    }


def compile_(start, seconds, phase="serving"):
    return {"family": "fwd", "label": "(causal=False)", "phase": phase, "start": start, "seconds": seconds}


def step(start, seconds):
    return {"function": "engine:Runner.step", "start": start, "seconds": seconds, "usual": 0.01, "serving": True}


def test_a_slow_step_overlapping_another_process_s_serving_path_compile_on_the_wall_clock_waited_for_it():
    found = waits(
        [
            timeline(0, 100, 0, 1000.0, compiles=[compile_(5.0, 3.0)], steps=[step(4.9, 3.2)]),
            timeline(1, 101, 1, 1000.5, steps=[step(4.4, 3.1)]),  # started 0.5 s later: the same wall-clock moment
        ]
    )
    own, other = found
    assert own["during"] == []  # a process's own compile is its stall, not a wait
    assert other["pid"] == 101 and [(c["pid"], c["rank"], c["seconds"]) for c in other["during"]] == [(100, 0, 3.0)]


@pytest.mark.parametrize(
    "compiled",
    [compile_(20.0, 3.0), compile_(5.0, 3.0, phase="warmup")],  # later; or a warm-up compile, no stall of serving
)
def test_a_slow_step_that_overlaps_no_serving_path_compile_waited_for_nothing_mlacheck_saw(compiled):
    [other] = waits(
        [timeline(0, 100, 0, 1000.0, compiles=[compiled]), timeline(1, 101, 1, 1000.0, steps=[step(5.0, 3.0)])]
    )
    assert other["during"] == []
