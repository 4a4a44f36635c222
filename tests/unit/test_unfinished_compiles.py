"""Compiles that never ended (analysis/unfinished.py): the stall a finding states, measured to its process's last
recorded moment, or said not measured where that moment is the compile's own start (a process killed in it)."""

from __future__ import annotations

from mlacheck.analysis.tables import ProcessFacts, UnfinishedCompile
from mlacheck.analysis.unfinished import stall_of, unfinished_reasons

START = {"type": "compile_start", "family": "attn.prefill", "site": "serve.py:9", "t": 4.0}
DIED = "the process died in it"


def test_a_compile_its_process_was_killed_in_with_nothing_recorded_after_is_not_measured():
    stall, ended, summary = stall_of(UnfinishedCompile(START, "serving", 0.0, DIED))
    assert ended == "never ended"
    assert summary == "serving-path compile, never finished (stall not measured)"
    assert stall.startswith("a stall of unknown length, at least as long as the compile ran (the process died in it;")
    assert "0.0 s" not in stall + summary and "≥" not in summary


def test_a_compile_with_a_later_moment_is_measured_to_it():
    stall, ended, summary = stall_of(UnfinishedCompile(START, "serving", 1.04, DIED))
    assert (stall, ended, summary) == (
        "a stall of at least 1.0 s that never ended (the process died in it)",
        "never ended",
        "≥1.0 s serving-path compile, never finished",
    )


def test_an_incomplete_reason_says_no_zero_seconds_either():
    fact = ProcessFacts(proc=0, pid=7)
    fact.unfinished = [UnfinishedCompile(START, "warmup", 0.0, DIED), UnfinishedCompile(START, "warmup", 2.0, DIED)]
    assert unfinished_reasons({0: fact}) == [
        "pid 7: a compile of attn.prefill (warmup) began at serve.py:9 and never ended (the process died in it): what "
        "it compiled is unknown",
        "pid 7: a compile of attn.prefill (warmup) began at serve.py:9 and never ended (the process died in it, at "
        "least 2.0 s later): what it compiled is unknown",
    ]


def test_a_variant_whose_compile_its_process_died_in_is_not_said_to_stall_zero_seconds():
    """The key known before the compile (the start names its variant): MLA001 of that variant, not measured."""
    from mlacheck.analysis import analyse
    from mlacheck.rulefiles import load_rules
    from tests.conftest import FIXTURES

    key = {"dtype": "bf16", "causal": True}
    start = {"type": "compile_start", "id": 0, "phase": "serving", "t": 4.0, "site": "serve.py:9"}
    events = [
        {"type": "run", "format_version": 3, "pid": 7},
        {"type": "family", "family": "synthetic", "version": "9"},
        {**start, "family": "synthetic", "vid": 0, "key": key},
    ]
    [finding] = analyse(events, load_rules(FIXTURES / "synthetic.toml")).findings
    assert finding.code == "MLA001" and finding.summary.endswith(
        "serving-path compile, never finished (stall not measured)"
    )
    assert "0.0 s" not in finding.message and "a stall of unknown length that never ended" in finding.message
