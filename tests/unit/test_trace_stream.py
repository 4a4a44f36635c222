"""A run folder's traces stream through the analysis (issue 29: never held whole), read ahead for each image's
serving-start marks. Properties: over random traces (several images through an exec, marks anywhere and more than
one, repeated counts, bad, hostile and cut-short lines, a mark or a run spelt with escapes, lines in UTF-16), the
analysis of the stream is the analysis of the same events held in a list; the quick schema check (`fits`) passes only
what the full one (`wrong`) passes. And a trace that lost lines, ends cut short, was killed or exec'd mid-way still
ends the run INCOMPLETE or FAIL, as before."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlacheck import events, trace
from mlacheck.analysis import analyse
from mlacheck.event_kinds import OPTIONAL, REQUIRED, USUAL, fits, usual_event, wrong
from mlacheck.program.run_folder import RunFolder
from mlacheck.program.saved import load_runs, program_report
from mlacheck.report.policy import ReportPolicy
from mlacheck.rulefiles import load_rules
from mlacheck.trace import TraceStream, read_trace
from tests.conftest import FIXTURES

RULES = load_rules(FIXTURES / "synthetic.toml")
KEYS = [{"dtype": dtype, "causal": causal} for dtype in ("fp8", "bf16") for causal in (True, False)]


def _compile(vid: int, phase: str, t: float) -> dict:
    return events.compile_event("synthetic", vid, KEYS[vid], None, phase, 0.5, "compile", "w.py:1", ["w.py:1 f"]) | {
        "t": t
    }


def _escaped(line: str) -> str:
    """The same event with its type spelt with an escape (a hostile writer's JSON, as valid as any)."""
    return line.replace('"type": "serving_start"', '"type": "\\u0073erving_start"').replace(
        '"type": "run"', '"type": "\\u0072un"'
    )


def _event(what: str, pid: int, vid: int, phase: str, t: float, count: int) -> dict | None:
    """An event of the kind `what` (None: a garbage line)."""
    made = {
        "compile": lambda: _compile(vid, phase, t),
        "dispatch": lambda: events.dispatch_event("synthetic", vid, KEYS[vid], None, phase, "s.py:2", [], {}),
        "mark": lambda: {"type": "serving_start", "how": "marked", "t": t},
        "counts": lambda: events.counts_event("synthetic", {f"{vid}:serving": count}, {}, False),
        "start": lambda: {"type": "compile_start", "id": vid, "phase": phase, "family": "synthetic", "t": t},
        "end": lambda: {"type": "compile_end", "id": vid, "seconds": 0.1, "outcome": "returned", "t": t},
        "net": lambda: {"type": "unwatched_compile", "net": "n", "kernel": "k", "phase": phase, "t": t},
        "exec": lambda: events.run_event(pid, 100.0 + t),
        "exit": lambda: {"type": "exit", "how": "exit", "t": t},
        "bad": lambda: {"type": "serving_start", "t": "soon"},
        "garbage": lambda: None,
    }
    return made[what]()


KINDS = ["compile", "dispatch", "mark", "counts", "start", "end", "net", "exec", "garbage", "bad", "exit"]


@st.composite
def lines(draw, pid: int) -> list[bytes]:
    """The lines of one process's trace: events of every kind the analysis reads, some of them damaged."""
    written: list[bytes] = []
    for step in range(draw(st.integers(1, 25))):
        phase = draw(st.sampled_from(["warmup", "serving", "unknown"]))
        event = _event(
            draw(st.sampled_from(KINDS)), pid, draw(st.integers(0, 3)), phase, step / 4, draw(st.integers(0, 9))
        )
        if event is None:
            written.append(b'{"type": "run", "pid": \n')
            continue
        if draw(st.integers(0, 9)) == 0:  # longer than the line limit below: a bad line, even where it is a mark
            written.append(json.dumps(event | {"padding": "x" * 300}).encode() + b"\n")
            continue
        text = json.dumps(event)
        if draw(st.booleans()):
            text = _escaped(text)
        if draw(st.integers(0, 6)) == 0:
            written.append(text.encode("utf-16-be") + b"\x00\n")
        else:
            written.append((text + "\n").encode())
    if draw(st.booleans()):
        written[-1] = written[-1][: len(written[-1]) // 2]  # cut short: the process was killed while writing
    return written


@st.composite
def folders(draw) -> list[list[bytes]]:
    return [
        [(json.dumps(events.run_event(pid, 100.0)) + "\n").encode(), *draw(lines(pid))]
        for pid in range(1, draw(st.integers(1, 3)) + 1)
    ]


def _listed(run: Path) -> list[dict]:
    """Every trace's events read whole into one list, each tagged with its process (an image each)."""
    listed, proc = [], -1
    for path in RunFolder(run).traces():
        for index, event in enumerate(read_trace(path).events):
            proc += event["type"] == "run" or index == 0
            listed.append({**event, "proc": proc})
    return listed


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(folders(), st.integers(1, 400))
def test_the_streamed_analysis_is_the_analysis_of_the_events_held_whole(tmp_path_factory, traces, block):
    """(The read-ahead's blocks and the line limit made small, so that lines span blocks and some are too long.)"""
    run = RunFolder.create(tmp_path_factory.mktemp("run") / "run").path
    for pid, written in enumerate(traces, 1):
        (run / f"trace-{pid}.jsonl").write_bytes(b"".join(written))
    limits = trace.BLOCK, trace.LINE_LIMIT
    trace.BLOCK, trace.LINE_LIMIT = block, 320
    try:
        streamed = analyse(load_runs([run]).digest, RULES)
        assert asdict(streamed) == asdict(analyse(_listed(run), RULES))
        for path in RunFolder(run).traces():  # what a trace counts against the budget of events: each it gives
            stream = TraceStream(path)
            assert sum(1 for _ in stream) == stream.count
    finally:
        trace.BLOCK, trace.LINE_LIMIT = limits


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(),  # NaN and Infinity too: JSON's parser gives them
    st.text(max_size=3),
    st.sampled_from(["warmup", "serving", "unknown", "returned", "raised"]),
    st.lists(st.text(max_size=2), max_size=2),
    st.lists(st.one_of(st.text(max_size=2), st.integers(), st.lists(st.integers(), max_size=1)), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.dictionaries(
        st.text(max_size=2), st.one_of(st.integers(), st.dictionaries(st.text(max_size=1), st.none())), max_size=2
    ),
)
kinds = sorted(set(REQUIRED) | set(OPTIONAL))


@st.composite
def json_events(draw) -> dict:
    kind = draw(st.sampled_from(kinds))
    names = [*REQUIRED.get(kind, {}), *OPTIONAL.get(kind, {}), "other"]
    chosen = draw(st.lists(st.sampled_from(names), unique=True))
    return {"type": kind} | {name: draw(values) for name in chosen}


@settings(max_examples=2000, deadline=None)
@given(json_events())
def test_the_quick_schema_check_passes_only_what_the_full_one_passes(event):
    if fits(event):
        assert wrong(event) is None
    elif event["type"] != "counts" and not (event["type"] == "compile_start" and event.get("vid") is not None):
        assert wrong(event) is not None  # (JSON's values are of exactly their types: the two agree)


def _fitting(name: str, expected: object) -> st.SearchStrategy:
    """Values of a field that mostly fit it (of its type, one of its choices), sometimes any value."""
    if name in ("key", "call"):
        kind = st.dictionaries(st.text(max_size=2), st.one_of(st.text(max_size=2), st.integers(), st.none()))
    elif name in ("stack", "providers", "key_fields", "argv", "entries", "foreign"):
        kind = st.lists(st.text(max_size=2), max_size=2)
    elif isinstance(expected, tuple) and all(isinstance(choice, str) for choice in expected):
        kind = st.sampled_from(expected)
    else:
        types = expected if isinstance(expected, tuple) else (expected,)
        made = {int: st.integers(), float: st.floats(), str: st.text(max_size=3), bool: st.booleans()}
        kind = st.one_of(*(made.get(t, values) for t in types))
    return st.one_of(kind, kind, kind, values)


@st.composite
def usual_events(draw) -> dict:
    kind = draw(st.sampled_from(USUAL))
    fields = {**REQUIRED.get(kind, {}), **OPTIONAL.get(kind, {}), "vid": int, "key": dict, "other": None}
    chosen = draw(st.lists(st.sampled_from(list(fields)), unique=True))
    return {"type": kind} | {name: draw(_fitting(name, fields[name])) for name in chosen}


@settings(max_examples=3000, deadline=None)
@given(st.one_of(usual_events(), json_events()), st.booleans())
def test_a_usual_event_read_in_one_pass_is_the_line_as_read_and_fits_its_kind(event, ascii_only):
    """The one-pass reader of the usual kinds (a variant's compile_start, compile_end, compile and dispatch) gives an
    event only where the slow way gives the same one (every value of the same type and, inside it, order) and `fits`
    passes it; anything else goes the slow way, which says why."""
    line = json.dumps(event, ensure_ascii=ascii_only, separators=(",", ":")).encode("utf-8", "surrogatepass")
    read = usual_event(line)
    if read is None:
        return
    slow = trace._loads(line)
    assert fits(slow) and read.keys() == slow.keys(), (line, read)
    assert all(_same(read[name], slow[name]) for name in slow), (line, read)


def test_a_variant_s_events_as_mlacheck_writes_them_are_read_in_one_pass():
    key, stack = {"dtype": "bf16", "n": 2, "shape": [1, 2]}, ["a.py:1 f"]
    written = [
        events.compile_start_event("warmup", "a.py:1", stack, "f", 3, key),
        events.compile_end_event(0, 0.5, "returned"),
        events.compile_event("f", 3, key, None, "warmup", 0.5, "compile", "a.py:1", stack),
        events.dispatch_event("f", 3, key, None, "serving", "a.py:2", stack, {"m": 1}),
    ]
    for event in written:
        line = json.dumps(event, separators=(",", ":")).encode()  # (as the sink writes it)
        assert usual_event(line) == json.loads(line), line
        assert usual_event(json.dumps(event).encode()) is None  # (spaced otherwise: the slow way, which reads it)
    assert usual_event(b'{"type":"compile_start","id":0,"phase":"warmup","t":1,"vid":3}') is None  # (no key: slow way)
    assert usual_event(b'{"type":"run","pid":1}') is None and usual_event(b' {"type":"dispatch"}') is None


def _verdict(tmp_path: Path, *written: bytes) -> tuple[str, list[str]]:
    folder = RunFolder.create(tmp_path / "run")
    folder.write_meta({"command": ["python", "serve.py"], "exit_code": 0, "signal": None})
    run = folder.path
    (run / "trace-7.jsonl").write_bytes(b"".join(written))
    report = program_report([run], RULES, policy=ReportPolicy(allow_incomplete=True))
    return report.verdict, report.incomplete


def _line(event: dict) -> bytes:
    return (json.dumps(event) + "\n").encode()


RUN = _line(events.run_event(7, 100.0)) + _line(
    events.family_event("synthetic", "mlacheck", "0.3.0", [], ["dtype", "causal"], "dict", None, 0)
)
WARM = _line(_compile(0, "warmup", 0.5) | {"vid": 0})
MARK = _line({"type": "serving_start", "how": "marked", "t": 1.0})
SERVED = _line(events.dispatch_event("synthetic", 0, KEYS[0], None, "serving", "s.py:2", [], {}))
EXIT = _line({"type": "exit", "how": "exit", "t": 2.0})
FINAL = _line(events.counts_event("synthetic", {"0:serving": 3}, {}, True))


def test_a_clean_trace_passes_so_the_damage_below_is_what_fails_it(tmp_path):
    assert _verdict(tmp_path, RUN, WARM, MARK, SERVED, FINAL, EXIT) == ("pass", [])


def test_a_stack_whose_frames_are_not_text_is_a_line_that_could_not_be_read(tmp_path):
    """A hostile stack of lists and objects: the report model takes frames of text only (it raised on one)."""
    hostile = _line(_compile(0, "warmup", 0.5) | {"vid": 0, "stack": [["serve.py", 3], {"frame": 1}]})
    trace = tmp_path / "run" / "trace-7.jsonl"
    verdict, incomplete = _verdict(tmp_path, RUN, hostile, MARK, SERVED, FINAL, EXIT)
    assert verdict == "incomplete"
    assert f"events were lost: {trace}:3 (a compile event whose stack is not a list of text) could not be read" in (
        incomplete
    )


SPOILED = [
    ({"spelling": ["positional"]}, "a compile event whose spelling is not an object"),
    ({"key": {"dtype": {"a": 1}, "causal": True}}, "a compile event whose key holds an object"),
    ({"type": {"a": 1}}, "an unknown event type \"{'a': 1}\""),
]


@pytest.mark.parametrize(("fields", "why"), SPOILED, ids=["a spelling", "a key", "a type"])
def test_a_warm_up_compile_the_report_cannot_hold_is_a_line_that_could_not_be_read(tmp_path, fields, why):
    """A spelling that is no object, a key field's value that is an object, a type that is no text: the report model
    could not hold them (the report ended in an internal error)."""
    hostile = _line(_compile(0, "warmup", 0.5) | {"vid": 0, **fields})
    trace = tmp_path / "run" / "trace-7.jsonl"
    verdict, incomplete = _verdict(tmp_path, RUN, hostile, MARK, SERVED, FINAL, EXIT)
    assert verdict == "incomplete"
    assert f"events were lost: {trace}:3 ({why}) could not be read" in incomplete


def test_a_call_that_holds_an_object_and_a_target_arch_that_is_no_text_end_in_a_report(tmp_path):
    """A first dispatch whose call facts hold an object is a line that could not be read; a target arch that a process
    showed as a number or an object is its text (each ended the report in an internal error)."""
    called = _line(events.dispatch_event("synthetic", 0, KEYS[0], None, "serving", "s.py:2", [], {"q": {"a": 1}}))
    shown = _line({"type": "context", "values": {"target_arch": 90}})
    run = _line(events.run_event(7, 100.0) | {"target_arch": {"sm": 90}})
    family = RUN.splitlines(keepends=True)[1]
    verdict, incomplete = _verdict(tmp_path, run, family, WARM, MARK, called, FINAL, EXIT)
    trace = tmp_path / "run" / "trace-7.jsonl"
    assert verdict == "incomplete"
    assert f"events were lost: {trace}:5 (a dispatch event whose call holds an object) could not be read" in incomplete
    folder = tmp_path / "again"
    folder.mkdir()
    assert _verdict(folder, run, family, shown, WARM, MARK, SERVED, FINAL, EXIT)[0] == "pass"
    report = program_report([folder / "run"], RULES)
    assert report.target_arch == "90"
    (folder / "run" / "trace-7.jsonl").write_bytes(run + family + WARM + MARK + SERVED + FINAL + EXIT)
    assert program_report([folder / "run"], RULES).target_arch == "{'sm': 90}"


BARE = [
    ({"type": "internal_error"}, "internal_error event without 'where'"),
    ({"type": "dispatch_error", "family": "synthetic", "function": "dispatch"}, "without 'reached_lookup'"),
    ({"type": "lost", "events": 1}, "a lost event without 'errors'"),
    ({"type": "unwatched_compile", "net": "n", "phase": "warmup"}, "unwatched_compile event without 'kernel'"),
]


@pytest.mark.parametrize(("event", "why"), BARE, ids=[event["type"] for event, _ in BARE])
def test_an_event_without_a_field_its_reader_reads_is_a_line_that_could_not_be_read(tmp_path, event, why):
    """Fields the event's JSON Schema requires and the analysis reads, that the kind check took as optional: each
    event without one ended the report in an internal error."""
    trace = tmp_path / "run" / "trace-7.jsonl"
    verdict, incomplete = _verdict(tmp_path, RUN, WARM, _line(event), MARK, SERVED, FINAL, EXIT)
    assert verdict == "incomplete"
    assert any(line.startswith(f"events were lost: {trace}:4 (") and why in line for line in incomplete), incomplete


def test_a_count_of_a_variant_numbered_in_other_digits_is_a_line_that_could_not_be_read(tmp_path):
    """A dispatch count labelled "²:serving" (a digit, but no number int() reads): the report ended in an internal
    error."""
    hostile = _line(events.counts_event("synthetic", {"0:serving": 3, "²:serving": 1}, {}, True))
    trace = tmp_path / "run" / "trace-7.jsonl"
    verdict, incomplete = _verdict(tmp_path, RUN, WARM, MARK, SERVED, hostile, EXIT)
    assert verdict == "incomplete"
    assert f"events were lost: {trace}:6 (a counts event with a dispatch count '²:serving': 1) could not be read" in (
        incomplete
    )


LOST = _line({"type": "lost", "events": 2, "errors": {"OSError": 2}})
NEVER_ENTERED = (
    "synthetic: 1 dispatched variant(s) never seen entering the cache: (dtype=fp8, causal=True) (an insert capture "
    "did not see, such as one made from C or through a reference taken before mlacheck): whether it compiled on the "
    "serving path is unknown"
)


@pytest.mark.parametrize(
    ("written", "verdict", "incomplete"),
    [
        (
            (RUN, WARM, LOST, MARK, SERVED, FINAL, EXIT),
            "incomplete",
            ["TRACE: 2 event(s) were never written to it (OSError x2)"],
        ),
        (
            (RUN, WARM, b'{"type": "dispatch", "fam', MARK, SERVED, FINAL, EXIT),
            "incomplete",
            ["TRACE:4 could not be read"],
        ),
        (
            (RUN, WARM, MARK, SERVED, FINAL, EXIT[:-9]),
            "incomplete",
            ["TRACE ends in a cut-short line (its process was killed while writing it)"],
        ),
        ((RUN, WARM, MARK, _line(_compile(1, "serving", 1.5) | {"vid": 1}), FINAL), "fail", []),  # killed: no exit
        ((RUN, WARM, MARK, SERVED, _line(events.run_event(7, 200.0)), SERVED, EXIT), "incomplete", [NEVER_ENTERED]),
    ],
    ids=["lost lines", "a garbage line", "cut short", "killed", "an exec mid-way"],
)
def test_lost_lines_a_cut_short_line_a_kill_or_an_exec_mid_way_never_pass(tmp_path, written, verdict, incomplete):
    """Word for word what the reader that held every event said (measured before the stream, e916e6e)."""
    trace = tmp_path / "run" / "trace-7.jsonl"
    expected = [
        line if line == NEVER_ENTERED else f"events were lost: {line.replace('TRACE', str(trace))}"
        for line in incomplete
    ]
    assert _verdict(tmp_path, *written) == (verdict, expected)


def test_a_format_1_trace_in_a_run_folder_streams_as_it_reads_whole(tmp_path):
    """A trace of format 1 is read whole and upgraded (no marks to read ahead): its analysis is that of its events."""
    from tests.unit.test_analysis_rules import FORMAT_1, PREFILL

    run = RunFolder.create(tmp_path / "run").path
    (run / "trace-7.jsonl").write_text("".join(json.dumps(event) + "\n" for event in FORMAT_1))
    streamed = analyse(load_runs([run]).digest, PREFILL.rules())
    assert [f.code for f in streamed.findings] == ["MLA001", "MLA002"]  # (without the context MLA003 needs)
    assert asdict(streamed) == asdict(analyse(_listed(run), PREFILL.rules()))


def test_a_second_serving_mark_never_turns_a_serving_path_compile_into_warm_up(tmp_path):
    """The capture writes one mark an image (the first counts), and after it every compile is serving: a second mark
    (written by another hand) settled the compile before it as warm-up, and the run passed. Streamed and held whole
    alike."""
    served = _line(_compile(1, "serving", 1.5) | {"vid": 1})
    dispatched = _line(events.dispatch_event("synthetic", 1, KEYS[1], None, "serving", "s.py:2", [], {}))
    final = _line(events.counts_event("synthetic", {"1:serving": 1}, {}, True))
    assert _verdict(tmp_path, RUN, WARM, MARK, served, dispatched, MARK, final, EXIT) == ("fail", [])
    held = analyse(_listed(tmp_path / "run"), RULES)
    assert [f.code for f in held.findings if f.code == "MLA001"] == ["MLA001"]


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(10**40), max_value=10**40),
        st.floats(),
        st.text(),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF).map(str),  # lone surrogates
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=12,
)


def _same(a: object, b: object) -> bool:
    """Equal, of exactly the same types, NaN equal to NaN, -0.0 not 0.0, dict items in the same order."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return (a != a and b != b) or (a == b and str(a) == str(b))
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=1500, deadline=None)
@given(
    value=json_values,
    ascii_only=st.booleans(),
    cut=st.integers(0, 400),
    noise=st.sampled_from([b"", b"\n", b" \n", b"x", b"\xff", b"]", b"\\", b'"']),
)
def test_a_line_is_read_as_the_json_module_reads_it(value, ascii_only, cut, noise):
    """The trace's quick JSON reader (pydantic-core's, which the json module backs wherever it refuses a line) reads any
    line, whole, cut short or with bytes after it, as json.loads does: the same value, or an error."""
    line = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    line = line[: cut if cut < len(line) else len(line)] + noise
    try:
        expected = json.loads(line)
    except (ValueError, RecursionError) as error:
        expected = type(error)
    try:
        read = trace._loads(line)
    except (ValueError, RecursionError) as error:
        read = type(error)
    assert read is expected if isinstance(expected, type) else _same(read, expected), (line, read, expected)
