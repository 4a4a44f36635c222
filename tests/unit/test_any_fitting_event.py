"""Properties of any event the kind check lets through (`event_kinds.wrong` finds nothing), of any kind, with any values
of the types it takes:
- among a warm-up compile, a serving mark and a served dispatch, it ends in a report in every format and in the
  terminal at each detail: never an internal error (a value the analysis or a renderer cannot hold is the kind check's
  to refuse as a bad line; numerics events with figures that were text ended the report this way);
- anywhere in a trace that cannot pass (a serving-path compile, a process killed mid-compile, a lost record, an
  unwatched compile on the serving path), it never makes the run pass (a second serving mark did: the compile before
  it was settled as warm-up)."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rich.console import Console

from mlacheck import events
from mlacheck.event_kinds import KEYED, MEASURED, OPTIONAL, REQUIRED, TEXTS, wrong
from mlacheck.program.saved import program_report
from mlacheck.report import terminal
from mlacheck.report.formats import FORMATS, render
from mlacheck.report.policy import ReportPolicy
from mlacheck.rulefiles import load_rules
from tests.conftest import FIXTURES
from tests.unit.test_trace_stream import EXIT, FINAL, KEYS, MARK, RUN, SERVED, WARM, _compile, _line, _verdict

KINDS = sorted(set(REQUIRED) | set(OPTIONAL))
text = st.text(max_size=6)
number = st.one_of(st.integers(-2, 3), st.floats(-10, 10, allow_nan=False))
scalar = st.one_of(st.none(), st.booleans(), number, text, st.sampled_from(["fp8", "bf16"]))
key = st.dictionaries(st.sampled_from(["dtype", "causal", "other"]), st.one_of(scalar, st.lists(scalar, max_size=2)))
FIELDS = {  # values of the field names whose type alone says too little
    "family": st.sampled_from(["synthetic", "other"]),
    "vid": st.integers(-1, 2),
    "id": st.integers(0, 2),
    "kernel": st.dictionaries(
        st.sampled_from(["max_rel_err", "cosine_similarity", "lse_max_abs_err", "x"]),
        st.one_of(st.none(), number, st.sampled_from([float("nan"), float("inf"), float("-inf")])),
    ),
    "values": st.dictionaries(st.sampled_from(["target_arch", "kv_cache_dtype", "x"]), scalar),
    "spelling": st.fixed_dictionaries({}, optional={"positional": st.lists(text), "keywords": st.lists(text)}),
    "errors": st.dictionaries(text, st.integers(0, 3)),
    "dispatches": st.dictionaries(
        st.tuples(st.integers(0, 2), st.sampled_from(["warmup", "capture", "serving", "unknown"])).map(
            lambda pair: f"{pair[0]}:{pair[1]}"
        ),
        st.integers(0, 5),
    ),
    "calls": st.dictionaries(st.sampled_from(["dispatch", "dispatch!before", "dispatch!nolookup"]), st.integers(0, 3)),
}
BY_TYPE = {
    str: text,
    int: st.integers(-1, 3),
    bool: st.booleans(),
    dict: st.dictionaries(text, scalar, max_size=2),
    list: st.lists(text, max_size=2),
    (int, float): number,
    (str, type(None)): st.one_of(st.none(), text),
    (int, type(None)): st.one_of(st.none(), st.integers(-1, 3)),
}


def value_of(kind: str, name: str, expected: object):
    if isinstance(expected, tuple) and all(isinstance(choice, str) for choice in expected):
        return st.sampled_from(expected)
    if kind == "unwatched_compile" and name == "kernel" or kind == "compile_start" and name == "kernel":
        return text
    if name in KEYED:
        return key
    if name in TEXTS:
        return st.lists(text, max_size=3)
    if name in FIELDS and (name not in MEASURED or kind == "numerics"):
        return FIELDS[name]
    return BY_TYPE[expected]


@st.composite
def fitting_events(draw) -> dict:
    kind = draw(st.sampled_from(KINDS))
    event = {"type": kind}
    for name, expected in REQUIRED.get(kind, {}).items():
        event[name] = draw(value_of(kind, name, expected))
    optional = OPTIONAL.get(kind, {})
    for name in draw(st.lists(st.sampled_from(sorted(optional)), unique=True)) if optional else []:
        event[name] = draw(value_of(kind, name, optional[name]))
    return event


RULES_TEXT = (FIXTURES / "synthetic.toml").read_text() + (
    "\n[numerics]\nmax = { max_rel_err = 0.02 }\nmin = { cosine_similarity = 0.999 }\n"
)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def report_of(folder, written: list[bytes], event: dict, where: int):
    """The report of a run folder whose trace is `written` with `event` at `where` (among the events after RUN)."""
    assume(wrong(event) is None)  # (a compile_start with a vid and no key does not fit its kind)
    (folder / "synthetic.toml").write_text(RULES_TEXT)
    rules = load_rules(folder / "synthetic.toml")
    _verdict(folder, *written[:where], _line(event), *written[where:])
    return program_report([folder / "run"], rules, policy=ReportPolicy(allow_incomplete=True))


@SETTINGS
@given(event=fitting_events(), where=st.integers(1, 6))
def test_any_event_that_fits_its_kind_ends_in_a_report_in_every_format(tmp_path_factory, event, where):
    report = report_of(tmp_path_factory.mktemp("case"), [RUN, WARM, MARK, SERVED, FINAL, EXIT], event, where)
    assert report.verdict in ("pass", "fail", "incomplete")
    assert report.internal_errors == [] or event["type"] == "internal_error", report.internal_errors
    data = report.model_dump(mode="json")
    for fmt in FORMATS:
        assert isinstance(render(data, fmt), str)  # (github: annotations only, none where nothing is found)
    for detail in ("quiet", "normal", "verbose"):
        console = Console(file=io.StringIO(), width=100, color_system=None)
        terminal.render(report, console, detail)
        assert console.file.getvalue()


SERVING_COMPILE = [
    RUN,
    WARM,
    MARK,
    _line(_compile(1, "serving", 1.5) | {"vid": 1}),
    _line(events.dispatch_event("synthetic", 1, KEYS[1], None, "serving", "s.py:2", [], {})),
    _line(events.counts_event("synthetic", {"1:serving": 3}, {}, True)),
    EXIT,
]
NOT_PASSING = {  # traces that cannot pass as they are: (the trace, its verdict, its findings)
    "a serving-path compile": (SERVING_COMPILE, "fail", ["MLA001", "MLA002"]),
    "killed mid-compile": (
        [RUN, WARM, MARK, SERVED, FINAL, _line({"type": "compile_start", "id": 5, "phase": "serving", "family": "synthetic", "t": 1.2})],
        "fail",
        ["MLA001"],
    ),
    "a lost record": (
        [RUN, WARM, MARK, SERVED, _line({"type": "lost", "events": 1, "errors": {"OSError": 1}}), FINAL, EXIT],
        "incomplete",
        [],
    ),
    "an unwatched serving-path compile": (
        [RUN, WARM, MARK, SERVED, _line(events.unwatched_compile_event("n", "k", {}, 0.4, "serving", "s.py:3", [])),
         FINAL, EXIT],
        "fail",
        ["MLA007"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("base", sorted(NOT_PASSING))
def test_each_trace_below_cannot_pass_as_it_is(tmp_path, base):
    written, verdict, codes = NOT_PASSING[base]
    (tmp_path / "synthetic.toml").write_text(RULES_TEXT)
    _verdict(tmp_path, *written)
    report = program_report([tmp_path / "run"], load_rules(tmp_path / "synthetic.toml"))
    assert (report.verdict, [f["code"] for f in report.findings]) == (verdict, codes)


@SETTINGS
@given(base=st.sampled_from(sorted(NOT_PASSING)), event=fitting_events(), where=st.integers(1, 7))
def test_no_event_that_fits_its_kind_makes_a_run_that_cannot_pass_pass(tmp_path_factory, base, event, where):
    written = NOT_PASSING[base][0]
    where = min(where, len(written))
    assert report_of(tmp_path_factory.mktemp("case"), written, event, where).verdict != "pass", (base, event)
