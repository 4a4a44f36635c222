"""A run stopped by Ctrl-C before its traffic ended judges no warm-up as dead: what was never served is unverified."""

from pathlib import Path

from mlacheck.analysis import analyse
from mlacheck.rulefiles import RuleSet, load_rule_file

RULES = RuleSet([load_rule_file(Path(__file__).resolve().parents[1] / "fixtures" / "synthetic.toml")])
KEY = {"dtype": "fp8", "causal": True}
OTHER = {"dtype": "fp8", "causal": False}


def events():
    return [
        {"type": "run", "format_version": 2, "pid": 1, "proc": 0},
        {
            "type": "family",
            "family": "synthetic",
            "distribution": "mlacheck",
            "version": "0.2.0",
            "key_fields": ["dtype", "causal"],
            "proc": 0,
        },
        {
            "type": "compile",
            "family": "synthetic",
            "vid": 0,
            "key": KEY,
            "phase": "warmup",
            "seconds": 1.0,
            "origin": "compile",
            "site": "warm.py:1",
            "stack": [],
            "proc": 0,
        },
        {
            "type": "dispatch",
            "family": "synthetic",
            "vid": 1,
            "key": OTHER,
            "phase": "serving",
            "site": "serve.py:1",
            "stack": [],
            "call": {},
            "proc": 0,
        },
        {
            "type": "compile",
            "family": "synthetic",
            "vid": 1,
            "key": OTHER,
            "phase": "serving",
            "seconds": 1.0,
            "origin": "compile",
            "site": "serve.py:1",
            "stack": [],
            "proc": 0,
        },
        {
            "type": "counts",
            "family": "synthetic",
            "dispatches": {"1:serving": 1},
            "calls": {"dispatch": 1},
            "final": True,
            "proc": 0,
        },
        {"type": "exit", "how": "interrupted", "proc": 0},
    ]


def test_an_interrupted_run_reports_its_unserved_warm_up_as_unverified_not_dead():
    analysis = analyse(events(), RULES, interrupted="the traffic")
    warm, served = analysis.families[0].variants
    assert (warm.status, served.status) == ("unverified", "serving-path compile")
    assert not [finding for finding in analysis.findings if finding.code == "MLA002"]
    assert analysis.incomplete[0] == "the run was interrupted (Ctrl-C) during the traffic: the rest was not run"


def test_the_same_run_not_interrupted_is_dead_warm_up():
    analysis = analyse(events(), RULES)
    warm, _ = analysis.families[0].variants
    assert warm.status == "dead warm-up"
    assert [finding.code for finding in analysis.findings if finding.code == "MLA002"] == ["MLA002"]
    assert not any(reason.startswith("the run was interrupted") for reason in analysis.incomplete)
