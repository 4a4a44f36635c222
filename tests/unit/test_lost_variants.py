"""Variants a process's counts name that no compile or dispatch record shows: their records were lost, so whether they
compiled on the serving path is unknown. Never a PASS, said once (one line per process and family, naming the pid and
the variants), whatever the count, whether or not the family is declared or had a call counted."""

from __future__ import annotations

import pytest

from mlacheck.analysis import analyse
from mlacheck.rulefiles import load_rules
from tests.conftest import FIXTURES
from tests.fixtures.synthetic_harness import FP8_CONTEXT
from tests.unit.test_folded_compiles import EXIT, FAMILY, RUN, record

RULES = load_rules(FIXTURES / "synthetic.toml")


def counts(dispatches: dict, calls: dict | None = None, family: str = "synthetic") -> dict:
    return {"type": "counts", "family": family, "dispatches": dispatches, "calls": calls or {}, "final": True,
            "proc": 0}  # fmt: skip


def process(last: dict) -> list[dict]:
    """A process that precompiled and dispatched variant 0, its last counts `last`."""
    key = {"dtype": "fp8", "causal": True}
    dispatch = {"type": "dispatch", "family": "synthetic", "vid": 0, "key": key, "phase": "serving", "site": "s.py:2",
                "stack": [], "call": {}, "proc": 0}  # fmt: skip
    serving = {"type": "serving_start", "how": "marked", "t": 2.0, "proc": 0}
    return [{**RUN, "proc": 0}, {**FAMILY, "proc": 0}, record(), serving, dispatch, last, {**EXIT, "proc": 0}]


def lost(events: list[dict]) -> list[str]:
    """The reasons the run cannot pass that say records were lost, and that every reason is one."""
    analysis = analyse(events, RULES, FP8_CONTEXT)
    assert analysis.incomplete and not analysis.failed(), analysis.incomplete
    return [reason for reason in analysis.incomplete if "records are missing" in reason]


def test_variants_counted_without_a_record_are_said_once_with_their_pid_and_vids():
    events = process(counts({"0:serving": 1, "9:serving": 2, "12:warmup": 1}, {"dispatch": 4}))
    assert lost(events) == [
        "events were lost: pid 7: synthetic dispatches of 2 variant(s) counted (vid 9, 12) whose compile and dispatch "
        "records are missing (whether they compiled on the serving path is unknown)"
    ]


@pytest.mark.parametrize(
    "last",
    [
        pytest.param(counts({"0:serving": 1, "9:serving": 0}, {"dispatch": 1}), id="a zero count"),
        pytest.param(counts({"9:serving": 3}), id="no call counted"),
        pytest.param(counts({"9:serving": 3}, family="ghost"), id="a family no rule declares"),
    ],
)
def test_a_variant_counted_without_a_record_is_never_a_pass(last):
    [line] = lost(process(last))
    assert "vid 9" in line, line


def test_more_than_five_variants_are_counted_and_the_first_five_named():
    labels = {f"{vid}:serving": 1 for vid in range(20, 28)}
    [line] = lost(process(counts({"0:serving": 1, **labels}, {"dispatch": 9})))
    assert "of 8 variant(s) counted (vid 20, 21, 22, 23, 24, ...)" in line, line
