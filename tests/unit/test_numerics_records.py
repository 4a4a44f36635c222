"""A launched kernel's output against the reference (a `numerics` event, execute mode) is judged against its family's
`[numerics]` (MLA005) only where it names a variant its process recorded. A measurement of a variant no record shows
could not be judged: the run cannot pass (it passed, the breach unseen). A numerics event the analysis cannot judge
(no key, no figures, a figure that is no number) is a line that could not be read (each ended the report in an
internal error). NaN and Infinity are figures: a launch that measured one is beyond any bound."""

from __future__ import annotations

import pytest

from mlacheck import events
from mlacheck.program.saved import program_report
from mlacheck.report.policy import ReportPolicy
from mlacheck.rulefiles import load_rules
from tests.conftest import FIXTURES
from tests.unit.test_trace_stream import EXIT, FINAL, MARK, RUN, SERVED, WARM, _line, _verdict

KEY = {"dtype": "fp8", "causal": True}  # the variant WARM compiled and SERVED dispatched


@pytest.fixture
def judged(tmp_path):
    """The synthetic family's rules with a [numerics] tolerance."""
    rules = tmp_path / "synthetic.toml"
    bounds = "\n[numerics]\nmax = { max_rel_err = 0.02 }\nmin = { cosine_similarity = 0.999 }\n"
    rules.write_text((FIXTURES / "synthetic.toml").read_text() + bounds)
    return load_rules(rules)


def verdict(tmp_path, rules, *measured: dict):
    folder = tmp_path / "case"
    folder.mkdir()
    written = [RUN, WARM, MARK, SERVED, *(_line(m) for m in measured), FINAL, EXIT]
    _verdict(folder, *written)  # writes the run folder
    report = program_report([folder / "run"], rules, policy=ReportPolicy(allow_incomplete=True))
    return report.verdict, report.incomplete, [f["code"] for f in report.findings]


def measured(key: dict | None = KEY, **kernel: object) -> dict:
    event = events.numerics_event("synthetic", key or {}, kernel)
    if key is None:
        del event["key"]
    return event


@pytest.mark.parametrize(
    ("kernel", "expected"),
    [
        ({"max_rel_err": 0.001, "cosine_similarity": 0.99999}, ("pass", [], [])),
        ({"max_rel_err": 0.5, "cosine_similarity": 0.99999}, ("fail", [], ["MLA005"])),
        ({"max_rel_err": float("nan"), "cosine_similarity": 0.99999}, ("fail", [], ["MLA005"])),
        ({"max_rel_err": 0.001, "cosine_similarity": float("-inf")}, ("fail", [], ["MLA005"])),
        ({"max_rel_err": None, "cosine_similarity": 0.99999}, ("pass", [], [])),  # a figure a launch does not measure
    ],
    ids=["within", "beyond", "NaN", "-Infinity", "not measured"],
)
def test_a_measurement_of_a_recorded_variant_is_judged(tmp_path, judged, kernel, expected):
    assert verdict(tmp_path, judged, measured(**kernel)) == expected


def test_a_later_launch_that_measured_less_never_hides_an_earlier_breach(tmp_path, judged):
    """The worst of a variant's launches is judged, per figure: one that a later launch did not measure is kept (the
    later launch's figures replaced it, and the run passed)."""
    breach = measured(max_rel_err=0.5, cosine_similarity=0.99999)
    later = measured(cosine_similarity=0.99999)
    assert verdict(tmp_path, judged, breach, later) == ("fail", [], ["MLA005"])


def test_a_measurement_of_a_variant_no_record_shows_never_passes(tmp_path, judged):
    """Its key names a variant its process never recorded (its records lost, or the scenario's key and the capture's
    disagree): the breach could not be judged, and the run said PASS."""
    other = {"dtype": "bf16", "causal": True}
    result, incomplete, codes = verdict(tmp_path, judged, measured(other, max_rel_err=0.5, cosine_similarity=0.2))
    assert result == "incomplete" and codes == []
    assert incomplete == [
        "synthetic: the kernel's output was measured for 1 variant(s) that no compile or dispatch record of its process "
        "shows: (dtype=bf16, causal=True); the measurement could not be judged (MLA005)"
    ]


@pytest.mark.parametrize(
    "kernel",
    [{}, {"max_abs_err": 0.5}, {"max_rel_err": None, "cosine_similarity": None}],
    ids=["none", "other", "nulls"],
)
def test_a_measurement_without_a_figure_the_tolerance_bounds_never_passes(tmp_path, judged, kernel):
    """A launch measured, but none of the figures its family's [numerics] bounds: nothing was judged (it passed)."""
    result, incomplete, codes = verdict(tmp_path, judged, measured(**kernel))
    assert (result, codes) == ("incomplete", [])
    assert incomplete == [
        "synthetic: the kernel's output of (dtype=fp8, causal=True) was measured without a figure its [numerics] "
        "bounds (max_rel_err, cosine_similarity): it could not be judged (MLA005)"
    ]


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (measured(None, max_rel_err=0.5), "a numerics event without 'key'"),
        ({"type": "numerics", "family": "synthetic", "key": KEY}, "a numerics event without 'kernel'"),
        (measured(max_rel_err="0.5"), "a numerics event whose kernel holds a figure that is not a number"),
        (measured(max_rel_err=[0.5]), "a numerics event whose kernel holds a figure that is not a number"),
        (measured(max_rel_err=True), "a numerics event whose kernel holds a figure that is not a number"),
        (measured() | {"kernel": [0.5]}, "a numerics event whose kernel is not an object"),
    ],
    ids=["no key", "no figures", "text", "a list", "true", "figures in a list"],
)
def test_a_measurement_that_cannot_be_judged_is_a_line_that_could_not_be_read(tmp_path, judged, event, why):
    result, incomplete, _ = verdict(tmp_path, judged, event)
    trace = tmp_path / "case" / "run" / "trace-7.jsonl"
    assert result == "incomplete"
    assert f"events were lost: {trace}:6 ({why}) could not be read" in incomplete, incomplete
