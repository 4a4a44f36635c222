"""Rule files, traces, traffic profiles and the finding-code table and README agreement."""

import json
from pathlib import Path

import pytest

from mlacheck.codes import CODES
from mlacheck.errors import MlacheckError
from mlacheck.rulefiles import BUNDLED, load_rules
from mlacheck.scenario.engines import ENGINES
from mlacheck.scenario.prefill_traffic import Request, make_workload, prefix_chunks
from mlacheck.sinks import JsonlSink
from mlacheck.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]


def test_bundled_rules_load_and_name_the_prefill_key():
    rule = load_rules().family("tokenspeed_mla.prefill")
    assert rule.family.key_fields[0] == "q_dtype" and len(rule.family.key_fields) == 7
    assert Path(rule.source).parent == BUNDLED


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[family\nname=1", "broken TOML"),
        ("[family]\nname = 'x'", "family.distribution: Field required"),
        ("[family]\nname = 3", "family.name"),
    ],
)
def test_rule_errors_are_one_line_naming_file_and_key(tmp_path, text, expected):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(MlacheckError) as error:
        load_rules(path)
    message = str(error.value)
    assert str(path) in message and expected in message and "\n" not in message


def test_bad_version_specifier_is_refused(tmp_path):
    text = (BUNDLED / "tokenspeed_mla_prefill.toml").read_text().replace('"==0.2.16"', '"two point oh"')
    path = tmp_path / "r.toml"
    path.write_text(text)
    with pytest.raises(MlacheckError, match="family.checked_versions"):
        load_rules(path)


def test_trace_round_trip_and_truncated_last_line(tmp_path):
    path = tmp_path / "t.jsonl"
    sink = JsonlSink(path)
    sink.write({"type": "run", "format_version": 2, "pid": 1})
    sink.write({"type": "dispatch", "family": "f", "vid": 0, "key": {"a": True}, "phase": "serving"})
    sink.close()
    trace = read_trace(path)
    assert [e["type"] for e in trace.events] == ["run", "dispatch"] and not trace.truncated
    with path.open("a") as file:
        file.write('{"type": "dispatch", "fam')
    trace = read_trace(path)
    assert len(trace.events) == 2 and trace.truncated and trace.bad_lines == []


def test_a_garbage_line_loses_that_line_only_and_is_named(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [{"type": "run", "format_version": 2, "pid": 1}, {"type": "exit", "rank": None}]
    path.write_text(json.dumps(lines[0]) + "\nnot json\n" + json.dumps(lines[1]) + "\n")
    trace = read_trace(path)
    assert trace.events == lines and trace.bad_lines == [f"{path}:2"] and not trace.truncated


def test_trace_of_another_format_is_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"type": "run", "format_version": 99}) + "\n")
    with pytest.raises(MlacheckError, match="format 1"):
        read_trace(path)


def keys(calls):
    return [(c.kind, c.is_causal, c.return_lse) for c in calls]


sglang_profile, tokenspeed_profile = ENGINES["sglang"].traffic, ENGINES["tokenspeed"].traffic


def test_profiles_follow_upstream_call_patterns():
    plain = (Request(5), Request(9))
    prefixed = (Request(4, prefix_len=12), Request(7))
    assert keys(sglang_profile(plain, 16)) == [("extend", True, False)]
    assert keys(tokenspeed_profile(plain, 16)) == [("extend", True, True)]
    chunks = [("prefix-chunk", False, True)] * 2  # 16 // 2 requests = 8-token chunks over a 12-token prefix
    assert keys(sglang_profile(prefixed, 16)) == [("extend", True, True)] + chunks
    assert keys(tokenspeed_profile(prefixed, 16)) == [("extend", True, True)] + chunks


def test_prefix_chunks_cut_every_request_at_the_same_offsets():
    calls = prefix_chunks((Request(3, prefix_len=10), Request(2, prefix_len=4)), chunk_capacity=8)
    assert [c.kv_lens for c in calls] == [(4, 4), (4, 0), (2, 0)]
    assert [c.kv_starts for c in calls] == [(0, 0), (4, 4), (8, 8)]
    assert all(c.q_lens == (3, 2) for c in calls)


def test_workload_is_seeded_and_has_batches_with_and_without_prefix():
    first, again, other = make_workload(16, seed=1), make_workload(16, seed=1), make_workload(16, seed=2)
    assert first == again and first != other
    assert first.requests == 16
    assert not any(r.prefix_len for r in first.batches[0])
    assert any(r.prefix_len for batch in first.batches[1:] for r in batch)
    assert {c.return_lse for batch in first.batches for c in sglang_profile(batch, first.chunk_capacity)} == {
        True,
        False,
    }


def test_readme_lists_every_finding_code_from_the_code_table():
    readme = (ROOT / "README.md").read_text()
    for rule in CODES.values():
        assert f"| {rule.code} | {rule.name} | {rule.severity.value} | {rule.summary} |" in readme
