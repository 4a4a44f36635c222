"""The shortcuts the report takes at scale (issue 29) say what the long way says. Properties over random JSON values and
trace lines: `printable_report` (one quick look at a value's compact JSON text, a walk only where it finds an escape
or a control character) gives what escaping every string gives, so no control character of a run reaches a terminal
or a CI file unescaped; a trace line's quick parse is `json.loads`'s, and a line json.loads refuses stays refused; a
finding fingerprint's identity is the json module's text of it (a baseline made before matches); a variant's report
read from the analysis's object is the one read from the dict of its fields."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError
from rich.console import Console

from mlacheck.analysis.tables import Variant
from mlacheck.keys import key_identity
from mlacheck.report import common, formats, terminal
from mlacheck.report.baseline import FINGERPRINT_SCHEME, _identity_json
from mlacheck.report.common import printable, printable_report
from mlacheck.report.model import VariantReport, reported
from mlacheck.trace import _loads

HOSTILE = st.sampled_from(["\x1b[31m", "\n", "\t", "\x7f", "\x85", "\u202e", "\u2066", "\\", '"', "é", "日", "\x00"])
TEXT = st.one_of(st.text(max_size=6), st.lists(st.one_of(st.text(max_size=3), HOSTILE), max_size=4).map("".join))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), TEXT)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=30,
)


def escaped(value):
    """Every string of a JSON value, keys included, made printable: the long way."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(name)): escaped(item) for name, item in value.items()}
    if isinstance(value, list):
        return [escaped(item) for item in value]
    return value


def same(one, other) -> bool:
    """Equal, and of the same types all the way down (NaN equal to NaN)."""
    return json.dumps(one) == json.dumps(other)


@settings(max_examples=600, deadline=None)
@given(VALUES)
def test_printable_report_escapes_what_escaping_every_string_escapes(value):
    assert same(printable_report(value), escaped(value))


@settings(max_examples=200, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=40), st.integers(0, 39))
def test_a_long_list_checked_a_slice_at_a_time_misses_no_control_character(items, at):
    items = [*items, *items]
    items[at % len(items)] = {"site": "x.py:1\x1b]0;pwned\x07"}
    original, common.SLICE = common.SLICE, 3  # (slices of 3 items: a control character in any slice)
    try:
        assert same(printable_report({"variants": items}), escaped({"variants": items}))
    finally:
        common.SLICE = original


LINES = st.one_of(
    VALUES.map(lambda value: json.dumps(value, ensure_ascii=False)),
    st.dictionaries(TEXT, VALUES, max_size=4).map(lambda value: json.dumps({"type": "run", **value})),
    st.text(max_size=20),
)
ENDS = st.sampled_from(["", "\n", " \n", "\r\n", "\t", "x", "}\n", "\n\n", " {}\n"])


@settings(max_examples=1000, deadline=None)
@given(LINES, ENDS)
def test_a_lines_quick_parse_is_json_loads(text, end):
    line = (text + end).encode()
    try:
        expected = json.loads(line)
    except (ValueError, RecursionError):
        with pytest.raises(ValueError):
            _loads(line)
        return
    assert same(_loads(line), expected)


@settings(max_examples=1000, deadline=None)
@given(
    st.one_of(TEXT, SCALARS),
    st.one_of(TEXT, SCALARS),
    st.dictionaries(TEXT, VALUES, max_size=4),
    st.one_of(st.none(), st.integers(), st.booleans(), st.floats(), TEXT),
    st.lists(st.one_of(st.integers(1, 5), st.booleans()), max_size=1),
)
def test_a_fingerprints_identity_is_the_json_modules_text(code, family, key, rank, occurrence):
    identity = [FINGERPRINT_SCHEME, code, family, key_identity(key), rank, *occurrence]
    assert _identity_json(identity) == json.dumps(identity, separators=(",", ":"), ensure_ascii=True)


NUMBERS = st.one_of(st.none(), st.integers(-2, 2), st.floats(allow_nan=True, allow_infinity=True), st.booleans())


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(TEXT, VALUES, max_size=3),
    st.one_of(st.none(), st.dictionaries(TEXT, VALUES, max_size=2)),
    st.booleans(),
    NUMBERS,
    st.one_of(st.none(), TEXT),
    st.integers(0, 3),
    st.booleans(),
    st.dictionaries(TEXT, VALUES, max_size=2),
    st.one_of(st.none(), st.dictionaries(TEXT, NUMBERS, max_size=2)),
)
def test_a_variant_read_from_its_attributes_is_the_variant_read_from_its_fields(
    key, spelling, precompiled, seconds, site, dispatches, serving, call, numerics
):
    """The report model reads a variant's report from the analysis's object (pydantic's from_attributes) as it reads
    the dict of the fields it reports (`reported`): the same model, or the same refusal."""
    variant = Variant(key, spelling, precompiled=precompiled, compile_s=seconds, compiled_by=site)
    variant.dispatches, variant.serving_path_compile, variant.first_call, variant.numerics = (
        dispatches,
        serving,
        call,
        numerics,
    )
    variant.serving_path_compile_s = seconds if serving else None
    adapter = TypeAdapter(list[VariantReport])
    try:
        expected = adapter.validate_python([reported(variant)])[0]
    except ValidationError:
        with pytest.raises(ValidationError):
            adapter.validate_python([variant], from_attributes=True)
        return
    made = adapter.validate_python([variant], from_attributes=True)[0]
    assert made.model_fields_set == expected.model_fields_set
    assert same(made.model_dump(mode="json"), expected.model_dump(mode="json"))


class Untouchable(list):
    """A value any read of which fails the test."""

    def __iter__(self):
        raise AssertionError("read")

    __len__ = __getitem__ = __bool__ = __iter__


def test_the_renderers_that_leave_the_timeline_unchecked_never_read_it():
    """The terminal, JUnit and GitHub renderers escape what they read (`printable_read`) and leave the timeline out of
    it: none of them may read the timeline (its labels would reach the page unescaped)."""
    from tests.gold import gold

    report = {**gold("hostile"), "timeline": Untouchable()}
    terminal.render(report, Console(file=io.StringIO(), width=100), "verbose")
    for fmt in ("junit", "github"):
        formats.render(report, fmt)
