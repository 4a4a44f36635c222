"""A variant that entered the cache with no compile of its own (cache kind jit_dir: the library picks its kernel in
native code, and a key's first call may build nothing). `borrowed`: its kernel can only be one this process built for
another key: served, it is ok; never served, unused (no compile time wasted). `unknown`: loaded from a cache that held
entries from outside the process, or built for another key: before the process's serving-start mark it was ready
(warm-up); after it, or in a process that never marked serving start, the run cannot pass."""

from __future__ import annotations

import pytest

from mlacheck import events
from mlacheck.capture.phase import HOW_TO_MARK
from mlacheck.commands.progress import compile_line
from mlacheck.program.saved import program_report
from mlacheck.report.policy import ReportPolicy
from tests.unit.test_trace_stream import EXIT, FINAL, KEYS, MARK, RULES, RUN, SERVED, WARM, _line, _verdict


def entered(vid: int, phase: str, t: float) -> bytes:
    """A first call that built nothing, as the jit_dir adapter records it."""
    compile_event = events.compile_event("synthetic", vid, KEYS[vid], None, phase, None, "unknown", "w.py:1", [])
    return _line(compile_event | {"t": t})


def report(tmp_path, *written: bytes):
    _verdict(tmp_path, *written)
    return program_report([tmp_path / "run"], RULES, policy=ReportPolicy(allow_incomplete=True))


def test_a_borrowed_kernel_served_after_the_mark_is_ok(tmp_path):
    result = report(tmp_path, RUN, MARK, entered(0, "borrowed", 1.5), SERVED, FINAL, EXIT)
    assert (result.verdict, result.incomplete, result.findings) == ("pass", [], [])
    [[variant]] = [f.variants for f in result.families]
    assert (variant["status"], variant["compile_phase"], variant["compile_s"]) == ("ok", "borrowed", None)


def test_a_borrowed_kernel_never_served_is_unused_not_dead_warmup(tmp_path):
    result = report(tmp_path, RUN, WARM, entered(1, "borrowed", 0.7), MARK, SERVED, FINAL, EXIT)
    assert (result.verdict, [f["code"] for f in result.findings]) == ("pass", [])
    assert sorted(v["status"] for f in result.families for v in f.variants) == ["ok", "unused"]


def test_a_kernel_of_unknown_origin_before_the_mark_was_ready_for_serving(tmp_path):
    result = report(tmp_path, RUN, entered(0, "unknown", 0.5), MARK, SERVED, FINAL, EXIT)
    assert (result.verdict, result.incomplete) == ("pass", [])


@pytest.mark.parametrize("borrowed", [False, True], ids=["alone", "beside-a-borrowed-one"])
def test_a_kernel_of_unknown_origin_after_the_mark_never_passes(tmp_path, borrowed):
    extra = [entered(1, "borrowed", 1.6)] if borrowed else []
    result = report(tmp_path, RUN, WARM, MARK, entered(0, "unknown", 1.5), *extra, SERVED, FINAL, EXIT)
    assert result.verdict == "incomplete" and not result.findings
    [reason] = result.incomplete
    assert "no compile of this run made" in reason and "fp8" in reason and "empty cache" in reason, reason


def test_a_kernel_of_unknown_origin_in_a_process_that_never_marked_serving_start_never_passes(tmp_path):
    result = report(tmp_path, RUN, entered(0, "unknown", 0.5), SERVED, FINAL, EXIT)
    assert result.verdict == "incomplete"
    [reason] = result.incomplete
    assert "never marked serving start" in reason and HOW_TO_MARK in reason, reason


def test_the_live_progress_lists_no_borrowed_key_and_a_serving_path_compile_in_red():
    borrowed = events.compile_event("synthetic", 0, KEYS[0], None, "borrowed", None, "unknown", "w.py:1", [])
    assert compile_line(borrowed) is None  # nothing compiled it
    serving = events.compile_event("synthetic", 1, KEYS[1], None, "serving", 2.5, "compile", "w.py:1", [])
    line = compile_line(serving)
    assert "compiled in 2.5 s (serving path" in line.plain
    assert [span.style for span in line.spans if "serving path" in line.plain[span.start : span.end]] == ["bold red"]


def two_processes(tmp_path, first: list[bytes], second: list[bytes], host: str | None = None):
    """A run folder of two traces: process 7's (`first`) and process 8's (`second`, from its run event on, on `host`:
    None, the first's)."""
    _verdict(tmp_path, *first)
    run8 = _line(events.run_event(8, 100.0, **({"host": host} if host else {}))) + _line(
        events.family_event("synthetic", "mlacheck", "0.3.0", [], ["dtype", "causal"], "dict", None, 0)
    )
    (tmp_path / "run" / "trace-8.jsonl").write_bytes(b"".join([run8, *second]))
    return program_report([tmp_path / "run"], RULES, policy=ReportPolicy(allow_incomplete=True))


def built(vid: int, entries: list[str]) -> bytes:
    compile_event = events.compile_event("synthetic", vid, KEYS[vid], None, "warmup", 0.5, "compile", "w.py:1", [])
    return _line(compile_event | {"t": 0.5, "entries": entries})


def found(vid: int, foreign: list[str]) -> bytes:
    compile_event = events.compile_event("synthetic", vid, KEYS[vid], None, "unknown", None, "unknown", "w.py:1", [])
    return _line(compile_event | {"t": 1.5, "foreign": foreign})


def test_a_shape_that_ran_a_kernel_another_process_of_the_run_built_is_borrowed(tmp_path):
    """Ranks sharing one cache (vLLM's DG_JIT_CACHE_DIR for every rank): process 8 served a shape whose kernel process
    7's warm-up built; it found that entry, made by no call of its own, and a compile of the run made it."""
    first = [RUN, built(0, ["gemm.aa"]), MARK, SERVED, FINAL, EXIT]
    second = [MARK, found(0, ["gemm.aa"]), SERVED, FINAL, EXIT]
    result = two_processes(tmp_path, first, second)
    assert (result.verdict, result.incomplete) == ("pass", [])


@pytest.mark.parametrize("foreign", [["gemm.aa", "gemm.zz"], []], ids=["an-earlier-runs-entry", "none-named"])
def test_a_shape_whose_process_found_an_entry_no_compile_of_the_run_made_never_passes(tmp_path, foreign):
    first = [RUN, built(0, ["gemm.aa"]), MARK, SERVED, FINAL, EXIT]
    second = [MARK, found(0, foreign), SERVED, FINAL, EXIT]
    result = two_processes(tmp_path, first, second)
    assert result.verdict == "incomplete" and "no compile of this run made" in " ".join(result.incomplete)


def test_an_entry_of_the_same_path_built_on_another_host_is_not_the_one_found(tmp_path):
    """Nodes of a multi-node run each have their own disk: process 8, on another host, found its entry elsewhere."""
    first = [RUN, built(0, ["/cache/gemm.aa"]), MARK, SERVED, FINAL, EXIT]
    second = [MARK, found(0, ["/cache/gemm.aa"]), SERVED, FINAL, EXIT]
    assert two_processes(tmp_path, first, second).verdict == "pass"
    other = tmp_path / "other"
    other.mkdir()
    assert two_processes(other, first, second, host="node-2").verdict == "incomplete"


def test_an_entry_another_process_built_in_a_netted_call_counts_as_the_runs(tmp_path):
    """A layout kernel built at weight loading through a netted operation (vLLM and SGLang lay out weight scales with
    DeepGEMM's helpers) is a compile of the run too, named by its net (the family's name)."""
    netted = events.unwatched_compile_event("synthetic", "layout", {}, 0.4, "warmup", "w.py:2", [], ["/c/layout.aa"])
    first = [RUN, WARM, _line(netted), MARK, SERVED, FINAL, EXIT]
    second = [MARK, found(0, ["/c/layout.aa"]), SERVED, FINAL, EXIT]
    assert two_processes(tmp_path, first, second).verdict == "pass"
