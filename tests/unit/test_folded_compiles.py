"""A watched compile that returned, folded into its record (trace format 4): the record names its compile_start
(`start`), and where it is the trace's next line after the compile returned, no compile_end is written
(`sinks.JsonlSink.end`). Never a PASS the evidence does not give: a compile with no end and no record is one its
process died in, a record that names no compile its process began is a stray, a compile_start whose id came again
is not forgotten; and the old form (compile_end, then a record that names nothing) reads as it did."""

from __future__ import annotations

import json

import pytest

from mlacheck import events as make
from mlacheck.analysis import analyse
from mlacheck.rulefiles import load_rules
from mlacheck.sinks import JsonlSink, MemorySink, TeeSink
from tests.conftest import FIXTURES
from tests.fixtures.synthetic_harness import FP8, FP8_CONTEXT, mark_serving_start, observe

RULES = load_rules(FIXTURES / "synthetic.toml")
KEY = {"dtype": "fp8", "causal": True}
RUN = {"type": "run", "format_version": 4, "pid": 7}
FAMILY = {"type": "family", "family": "synthetic", "version": "9"}
EXIT = {"type": "exit", "how": "exit", "t": 9.0}


def start(id: int, phase: str = "warmup", proc: int = 0, family: str = "synthetic", **known) -> dict:
    return {"type": "compile_start", "id": id, "phase": phase, "site": "w.py:1", "stack": [], "t": 1.0,
            "family": family, "proc": proc, **known}  # fmt: skip


def end(id: int, proc: int = 0, outcome: str = "returned") -> dict:
    return {"type": "compile_end", "id": id, "seconds": 0.5, "outcome": outcome, "t": 1.5, "proc": proc}


def record(vid: int = 0, phase: str = "warmup", proc: int = 0, family: str = "synthetic", **named) -> dict:
    key = {"dtype": "fp8", "causal": vid == 0}
    return {"type": "compile", "family": family, "vid": vid, "key": key, "spelling": None, "phase": phase,
            "seconds": 0.5, "origin": "compile", "site": "w.py:1", "stack": [], "t": 1.5, "proc": proc, **named}  # fmt: skip


def dispatched(vid: int = 0, proc: int = 0) -> list[dict]:
    key = {"dtype": "fp8", "causal": vid == 0}
    return [
        {"type": "serving_start", "how": "marked", "t": 2.0, "proc": proc},
        {"type": "dispatch", "family": "synthetic", "vid": vid, "key": key, "phase": "serving", "site": "s.py:2",
         "stack": [], "call": {}, "proc": proc},
        {"type": "counts", "family": "synthetic", "dispatches": {f"{vid}:serving": 1}, "calls": {"dispatch": 1},
         "final": True, "proc": proc},
    ]  # fmt: skip


def process(*middle: dict, proc: int = 0, exited: bool = True, version: int = 4) -> list[dict]:
    head = [{**RUN, "format_version": version, "pid": 7 + proc, "proc": proc}, {**FAMILY, "proc": proc}]
    return head + list(middle) + [*dispatched(proc=proc)] + ([{**EXIT, "proc": proc}] if exited else [])


def verdict(events: list[dict]) -> str:
    analysis = analyse(events, RULES, FP8_CONTEXT)
    return "FAIL" if analysis.failed() else "INCOMPLETE" if analysis.incomplete else "PASS"


def reasons(events: list[dict]) -> list[str]:
    return analyse(events, RULES, FP8_CONTEXT).incomplete


def told(events: list[dict], text: str) -> bool:
    """The run is incomplete, and a reason says `text`."""
    return verdict(events) == "INCOMPLETE" and any(text in reason for reason in reasons(events))


# -- the folded form and the old one ------------------------------------------------------------------------------
def test_a_folded_record_closes_its_compile_and_the_run_passes():
    assert verdict(process(start(0), record(start=0))) == "PASS"


@pytest.mark.parametrize("version", [3, 4])
def test_the_old_form_still_closes_its_compile(version):
    assert verdict(process(start(0), end(0), record(), version=version)) == "PASS"
    assert verdict(process(start(0), end(0), record(start=0), version=version)) == "PASS"


@pytest.mark.parametrize("version", [3, 4])
def test_a_process_that_died_after_the_end_and_before_its_record_is_still_told_in_the_old_form(version):
    assert told(process(start(0), end(0), exited=False, version=version), "ended after 0.5 s, and the process died")


# -- a compile with no end and no record: the process died in it (the fold's window too) ---------------------------
def test_a_compile_begun_with_no_end_and_no_record_is_one_its_process_died_in():
    assert told(process(start(0), exited=False), "began at w.py:1 and never ended (the process died in it")


def test_a_compile_begun_with_no_end_and_no_record_in_an_exited_process_is_not_forgotten():
    assert told(process(start(0)), "never ended (the process was still in it when it exited")


def test_a_serving_compile_that_returned_and_died_before_its_folded_record_is_a_finding():
    """The window of the fold: the compile returned, its end held, the process killed before the line."""
    marked = {"type": "serving_start", "how": "marked", "t": 0.5, "proc": 0}
    events = [{**RUN, "proc": 0}, {**FAMILY, "proc": 0}, marked, start(0, "serving", vid=0, key=KEY)]
    analysis = analyse(events, RULES, FP8_CONTEXT)
    assert [f.code for f in analysis.findings] == ["MLA001"] and analysis.failed()
    assert "never finished" in analysis.findings[0].summary


# -- records that name a compile they cannot close ----------------------------------------------------------------
def test_a_folded_record_whose_start_matches_no_compile_start_is_a_stray():
    [reason] = reasons(process(record(start=5)))
    assert reason == (
        "pid 7: a record of synthetic names compile 5, which its process did not begin (or had closed, or began for "
        "another family): the trace is not whole"
    )


def test_a_folded_record_that_names_another_compile_id_leaves_the_open_one_unfinished():
    found = reasons(process(start(0), record(start=1), exited=False))
    assert any("names compile 1" in reason for reason in found)
    assert any("never ended (the process died in it" in reason for reason in found)


def test_a_folded_record_cannot_close_a_compile_of_another_process():
    events = process(start(0), exited=False) + process(record(start=0, proc=1), proc=1)
    found = reasons(events)
    assert any(reason.startswith("pid 7: a compile of synthetic (warmup) began") for reason in found)
    assert any(reason.startswith("pid 8: a record of synthetic names compile 0") for reason in found)


def test_a_folded_record_cannot_close_a_compile_of_another_family():
    found = reasons(process(start(0, family="other"), record(start=0), exited=False))
    assert any("names compile 0" in reason for reason in found)
    assert any("a compile of other (warmup) began" in reason for reason in found)


def test_a_second_record_naming_the_same_compile_is_a_stray():
    found = reasons(process(start(0), record(start=0), record(1, start=0)))
    assert len(found) == 1 and "names compile 0" in found[0]


def test_many_strays_are_one_reason_that_counts_them():
    [reason] = reasons(process(start(0), record(start=0), *[record(1, start=0)] * 3))
    assert "names compile 0" in reason and "(and 2 more such)" in reason


def test_a_record_naming_a_compile_that_raised_is_a_stray():
    found = reasons(process(start(0), end(0, outcome="raised"), record(start=0)))
    assert len(found) == 1 and "names compile 0" in found[0]


@pytest.mark.parametrize("exited", [True, False])
@pytest.mark.parametrize("version", [3, 4])
def test_a_compile_start_whose_id_came_again_leaves_the_earlier_compile_unfinished(exited, version):
    closing = [record(start=0)] if version == 4 else [end(0), record()]
    found = reasons(process(start(0), start(0, site="w.py:2"), *closing, exited=exited, version=version))
    assert len(found) == 1 and "a compile of synthetic (warmup) began" in found[0]


def test_from_format_4_a_record_that_names_no_compile_closes_none():
    """A record of origin compile that names nothing (an autotuning's, a variant found in the cache) does not take the
    compile another record names: no stray where the writer paired them."""
    preexisting = record(1, phase="preexisting")
    assert verdict(process(start(0), end(0), preexisting, record(start=0))) == "PASS"
    assert verdict(process(start(0), end(0), preexisting, exited=False)) == "INCOMPLETE"


# -- the sink folds what is adjacent, and only that ---------------------------------------------------------------
def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_trace_folds_the_end_into_the_record_that_follows_it(tmp_path):
    sink = JsonlSink(tmp_path / "trace.jsonl")
    sink.write(make.compile_start_event("warmup", "w.py:1", [], "synthetic"))
    begun = lines(tmp_path / "trace.jsonl")[0]["id"]
    sink.end(make.compile_end_event(begun, 0.5, "returned"))
    assert len(lines(tmp_path / "trace.jsonl")) == 1  # held
    sink.write(make.compile_event("synthetic", 0, KEY, None, "warmup", 0.5, "compile", "w.py:1", [], start=begun))
    sink.close()
    assert [(e["type"], e.get("start")) for e in lines(tmp_path / "trace.jsonl")] == [
        ("compile_start", None),
        ("compile", begun),
    ]


def test_the_trace_writes_the_end_first_where_another_line_comes_between(tmp_path):
    sink = JsonlSink(tmp_path / "trace.jsonl")
    sink.end(make.compile_end_event(3, 0.5, "returned"))
    sink.write(make.serving_start_event("marked", None))
    sink.end(make.compile_end_event(4, 0.5, "returned"))
    sink.write(make.compile_event("synthetic", 0, KEY, None, "warmup", 0.5, "compile", "w.py:1", [], start=3))
    sink.end(make.compile_end_event(5, 0.5, "returned"))
    sink.close()
    assert [(e["type"], e.get("id", e.get("start"))) for e in lines(tmp_path / "trace.jsonl")] == [
        ("compile_end", 3),
        ("serving_start", None),
        ("compile_end", 4),  # (not the compile the record names)
        ("compile", 3),
        ("compile_end", 5),  # (at close)
    ]


def test_a_counts_checkpoint_writes_the_held_end_first(tmp_path):
    """A compile that returned and whose record has not come is held only until the next checkpoint: a process that
    then dispatches variants it knew (no line) and is killed leaves its compile ended, not one it died in."""
    sink = JsonlSink(tmp_path / "trace.jsonl")
    sink.end(make.compile_end_event(3, 0.5, "returned"))
    sink.checkpoint({"synthetic": {"dispatches": {"0:serving": 7}, "calls": {"dispatch": 7}}})
    assert [(e["type"], e["id"]) for e in lines(tmp_path / "trace.jsonl")] == [("compile_end", 3)]
    sink.write(make.compile_event("synthetic", 0, KEY, None, "serving", 0.5, "compile", "w.py:1", [], start=3))
    sink.close()
    assert [e["type"] for e in lines(tmp_path / "trace.jsonl")] == ["compile_end", "compile"]


def test_a_refused_write_counts_the_held_end_it_carried(tmp_path):
    sink = JsonlSink(tmp_path / "trace.jsonl")
    sink.end(make.compile_end_event(0, 0.5, "returned"))

    def refuse(data: bytes) -> None:
        raise OSError(28, "No space left on device")

    sink._write_all = refuse
    sink.write(make.serving_start_event("marked", None))
    assert sink.lost == 2


def test_a_forked_childs_trace_drops_its_parents_held_end(tmp_path):
    sink = JsonlSink(tmp_path / "parent.jsonl")
    sink.end(make.compile_end_event(0, 0.5, "returned"))
    sink.reopen(tmp_path / "child.jsonl")
    sink.write(make.serving_start_event("marked", None))
    sink.close()
    assert [e["type"] for e in lines(tmp_path / "child.jsonl")] == ["serving_start"]


def test_a_sink_that_is_no_trace_writes_the_end_at_once():
    memory = MemorySink()
    TeeSink(memory).end(make.compile_end_event(0, 0.5, "returned"))
    assert [e["type"] for e in memory.events] == ["compile_end"]


# -- captured: the folded trace and the old form give the same analysis -------------------------------------------
def unfolded(folded: list[dict]) -> list[dict]:
    """The old form of a folded trace: a compile_end before each record that names its compile, the name dropped."""
    old = []
    for event in folded:
        if event["type"] == "compile" and "start" in event:
            old.append({"type": "compile_end", "id": event["start"], "seconds": event["seconds"],
                        "outcome": "returned", "t": event["t"]})  # fmt: skip
            event = {name: value for name, value in event.items() if name != "start"}
        old.append(event)
    return old


def test_a_captured_run_reads_the_same_folded_held_and_in_the_old_form(kind, tmp_path):
    trace = tmp_path / "trace.jsonl"
    memory, jsonl = MemorySink(), JsonlSink(trace)
    with observe(kind, sink=TeeSink(memory, jsonl)) as capture:
        kind.precompile(FP8, True)
        mark_serving_start(capture)
        kind.dispatch(1, FP8, True)
        kind.dispatch(1, FP8, False)
    jsonl.close()
    folded = [event for event in map(json.loads, trace.read_text().splitlines())]
    kinds = [e["type"] for e in folded]
    assert "compile_end" not in kinds and kinds.count("compile") == 2 == kinds.count("compile_start")
    assert [e["type"] for e in memory.events].count("compile_end") == 2  # (a sink that is no trace holds nothing)
    analyses = [analyse(events, kind.rules(), FP8_CONTEXT) for events in (folded, memory.events, unfolded(folded))]
    said = [(a.findings, a.incomplete, [f.variants for f in a.families]) for a in analyses]
    assert said[0] == said[1] == said[2]
    assert [f.code for f in analyses[0].findings] == ["MLA001"]
