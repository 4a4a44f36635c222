"""Counts are state, not a log (issue 29): while a process runs, its families' counts are kept in one checkpoint file
beside its trace, replaced at each flush, so the trace grows with variants and not with time; at exit a final counts
event closes the trace. The reader takes the last state: the final event, else the checkpoint ("at least": the process
did not exit), else the last counts event of an older trace."""

import json
from pathlib import Path

from mlacheck.analysis import analyse
from mlacheck.capture import CapturePolicy
from mlacheck.events import checkpoint_path, counts_event, run_event, start_run_clock
from mlacheck.sinks import JsonlSink
from mlacheck.trace import read_trace
from tests.fixtures.synthetic_harness import FP8, FP8_CONTEXT, PREFILL, family_capture, of_type

EVERY_FLUSH = CapturePolicy(flush_seconds=0.0)  # each slow path and every 1024th dispatch flushes


def traced(tmp_path: Path) -> tuple[object, Path]:
    path = tmp_path / "trace-1.jsonl"
    sink = JsonlSink(path)
    sink.write(run_event(1, start_run_clock()))  # the checkpoint names the image it is of by this start
    capture = family_capture(PREFILL, sink, EVERY_FLUSH)
    capture.install()
    return capture, path


def test_a_long_running_process_replaces_its_checkpoint_and_its_trace_does_not_grow(tmp_path):
    capture, path = traced(tmp_path)
    PREFILL.precompile(FP8, True)
    PREFILL.dispatch(1, FP8, True)
    size = path.stat().st_size
    for _ in range(5):
        for _ in range(3000):
            PREFILL.dispatch(1, FP8, True)
        capture.flush()
    assert path.stat().st_size == size  # no counts appended while it runs
    kept = json.loads(Path(checkpoint_path(path)).read_text())
    assert kept["format_version"] == 1 and kept["families"][PREFILL.family]["calls"] == {
        "tokenspeed_mla_prefill": 15001
    }
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".new"))] == []
    capture.remove()


def test_a_process_killed_between_checkpoints_still_says_at_least(tmp_path):
    capture, path = traced(tmp_path)
    PREFILL.precompile(FP8, True)
    for _ in range(2048):
        PREFILL.dispatch(1, FP8, True)
    capture.flush()
    for _ in range(100):  # counted after the last checkpoint, then the process is "killed": no remove, no exit
        PREFILL.dispatch(1, FP8, True)
    trace = read_trace(path)
    [counts] = of_type(trace.events, "counts")
    assert not counts["final"] and "t" in counts
    analysis = analyse(trace.events, PREFILL.rules(), FP8_CONTEXT)
    [variant] = analysis.families[0].variants
    assert variant.dispatches == 2048 and variant.at_least
    capture._patches.undo(capture.safely)  # the test's own clean-up, past the flush a remove would write


def test_the_final_counts_of_a_process_that_exited_win_over_its_checkpoint(tmp_path):
    capture, path = traced(tmp_path)
    PREFILL.precompile(FP8, True)
    for _ in range(2048):
        PREFILL.dispatch(1, FP8, True)
    capture.flush()
    PREFILL.dispatch(1, FP8, True)
    capture.remove()
    [counts] = of_type(read_trace(path).events, "counts")
    assert counts["final"] and sum(counts["dispatches"].values()) == 2049


def test_a_checkpoint_that_cannot_be_read_is_a_lost_record(tmp_path):
    path = tmp_path / "trace-7.jsonl"
    path.write_text(json.dumps(run_event(7, 0.0)) + "\n")
    Path(checkpoint_path(path)).write_text('{"format_version": 1, "families": ')
    [line] = read_trace(path).bad_lines
    assert line.startswith(f"{checkpoint_path(path)} (not a counts checkpoint")


def test_a_trace_of_format_2_keeps_reading_its_last_counts_event(tmp_path):
    path = tmp_path / "trace-9.jsonl"
    events = [
        {**run_event(9, 0.0), "format_version": 2},
        counts_event("synthetic", {"0:serving": 5}, {}, False),
        counts_event("synthetic", {"0:serving": 9}, {}, False),
    ]
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    trace = read_trace(path)
    assert trace.format_version == 2 and of_type(trace.events, "counts")[-1]["dispatches"] == {"0:serving": 9}


def test_a_checkpoint_is_the_state_of_the_image_that_kept_it(tmp_path):
    """An exec starts a new image in the same trace (vids are per image): the checkpoint the first image kept is read
    into that image, never as the counts of the image after it; one that no image of the trace wrote is a lost
    record."""
    path = tmp_path / "trace-5.jsonl"
    first, second = run_event(5, 100.0), run_event(5, 200.0)
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    kept = {"format_version": 1, "pid": 5, "started": 100.0, "t": 1.0}
    kept["families"] = {"synthetic": {"dispatches": {"0:serving": 3}, "calls": {}}}
    Path(checkpoint_path(path)).write_text(json.dumps(kept))
    trace = read_trace(path)
    assert [event["type"] for event in trace.events] == ["run", "counts", "run"]
    Path(checkpoint_path(path)).write_text(json.dumps({**kept, "started": 300.0}))
    [line] = read_trace(path).bad_lines
    assert line.startswith(f"{checkpoint_path(path)} (") and "no image of the trace wrote it" in line


def test_the_checkpoint_is_never_written_through_a_link(tmp_path):
    """The run folder's rule: a file created exclusively beside it, renamed over it; a link planted where the checkpoint
    or its temporary file goes is replaced, and what it points at is left alone."""
    import os

    capture, path = traced(tmp_path)
    target = tmp_path / "elsewhere"
    target.write_text("mine")
    os.symlink(target, checkpoint_path(path))
    os.symlink(target, tmp_path / f".{Path(checkpoint_path(path)).name}.{os.getpid()}.new")
    PREFILL.precompile(FP8, True)
    PREFILL.dispatch(1, FP8, True)
    capture.flush()
    assert target.read_text() == "mine"
    assert not Path(checkpoint_path(path)).is_symlink()
    assert json.loads(Path(checkpoint_path(path)).read_text())["families"][PREFILL.family]["calls"]
    capture.remove()
