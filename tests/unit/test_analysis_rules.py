"""Analysis against the rule file, per cache kind: key layout and stale-rule MLA004 (version, fingerprint), and
format-1 traces read as format 2."""

import json
from importlib.metadata import version

import pytest

from mlacheck.analysis import analyse
from mlacheck.capture.fingerprint import fingerprint
from mlacheck.keys import key_text, typed
from mlacheck.trace import read_trace, upgrade_format_1
from tests.fixtures.synthetic_harness import (
    BF16,
    DECODE,
    FA4,
    FP8,
    FP8_CONTEXT,
    PREFILL,
    observe,
    of_type,
    synthetic_cute,
    synthetic_fa4,
    torch,
)

MLACHECK_VERSION = version("mlacheck")  # the synthetic families are packages of this distribution


def with_family(rule, **changes):
    """The rule file with some [family] entries changed."""
    return rule.model_copy(update={"family": rule.family.model_copy(update=changes)})


def warm_and_serve(kind, rules=None):
    """Events of a run: FP8 precompiled and dispatched, BF16 compiled on the serving path."""
    with observe(kind, rules=rules) as capture:
        kind.precompile(FP8, True)
        kind.dispatch(1, FP8, True)
        kind.dispatch(1, BF16, True)
    return capture.sink.events


def stale_codes(analysis):
    return [f for f in analysis.findings if f.code == "MLA004"]


# -- key layout ---------------------------------------------------------------------------------------------


def test_a_key_with_more_fields_than_the_rule_names_is_mla004_and_no_diff_is_made_of_it(kind):
    rule = kind.rule()
    short = kind.rules(with_family(rule, key_fields=list(rule.family.key_fields[:-1])))
    events = warm_and_serve(kind, short)  # the stale rule names the fields as the capture records them
    [layout] = analyse(events, short, {}).findings  # no MLA001: a diff over misnamed fields would mislead
    assert layout.code == "MLA004"
    assert f"observed key has {len(kind.fields)} fields, the rule names {len(kind.fields) - 1}" in layout.message
    # a call key (functools, cache_once) is named by the signature; a dict's tuple key has no names of its own
    unnamed = kind.fields[-1] if kind.name in ("decode", "closure") else f"field{len(kind.fields) - 1}"
    assert layout.message.endswith(f"not in the rule: {unnamed}")


def test_a_functools_key_whose_fields_the_rule_names_otherwise_is_mla004():
    """A functools key names its fields from the cached function's signature (a dict key takes the rule's names)."""
    events = warm_and_serve(DECODE)
    rule = DECODE.rule()
    renamed = with_family(rule, key_fields=["dtype", *rule.family.key_fields[1:]])
    [layout] = stale_codes(analyse(events, DECODE.rules(renamed), FP8_CONTEXT))
    assert "missing dtype; not in the rule: torch_dtype" in layout.message
    swapped = with_family(
        rule, key_fields=[rule.family.key_fields[1], rule.family.key_fields[0], *rule.family.key_fields[2:]]
    )
    assert (
        "another order than the rule's" in stale_codes(analyse(events, DECODE.rules(swapped), FP8_CONTEXT))[0].message
    )


# -- versions and fingerprints -----------------------------------------------------------------------------


def test_the_family_event_carries_the_fingerprint_of_the_installed_code(kind):
    events = warm_and_serve(kind)
    [family] = of_type(events, "family")
    assert family["version"] == MLACHECK_VERSION and len(family["fingerprint"]) == 16
    assert family["fingerprint"] == fingerprint(kind.module, kind.rule().family.key_functions)


def test_the_rules_fingerprint_decides_over_the_version(kind):
    events = warm_and_serve(kind)
    installed = of_type(events, "family")[0]["fingerprint"]
    rule = kind.rule()

    same_code_other_version = analyse(
        events, kind.rules(with_family(rule, fingerprint=installed, checked_versions=">=9"))
    )
    assert stale_codes(same_code_other_version) == []
    assert same_code_other_version.families[0].notes == [
        f"mlacheck {MLACHECK_VERSION} lies outside the checked versions, but the code the key depends on is unchanged (same fingerprint)"
    ]

    [changed] = stale_codes(analyse(events, kind.rules(with_family(rule, fingerprint="0123456789abcdef"))))
    assert f"fingerprint {installed}, the rule was checked against 0123456789abcdef" in changed.message
    assert f'fingerprint = "{installed}"' in changed.hint

    # a rule checked against two releases' code records both fingerprints
    both = ["0123456789abcdef", installed]
    assert stale_codes(analyse(events, kind.rules(with_family(rule, fingerprint=both, checked_versions=">=9")))) == []
    [neither] = stale_codes(
        analyse(events, kind.rules(with_family(rule, fingerprint=["0123456789abcdef", "fedcba9876543210"])))
    )
    assert "the rule was checked against 0123456789abcdef or fedcba9876543210" in neither.message

    [outside] = stale_codes(analyse(events, kind.rules(with_family(rule, checked_versions=">=9"))))
    assert (
        f"installed mlacheck {MLACHECK_VERSION} lies outside the versions this rule was checked against (>=9)"
        in outside.message
    )
    assert stale_codes(analyse(events, kind.rules())) == []


@pytest.mark.parametrize(
    "providers, stale", [([], False), (["MLAcheck 0.1.0"], False), (["mlacheck-fork 0.1.0"], True)]
)
def test_a_package_installed_by_another_distribution_is_mla004(providers, stale):
    events = [
        {**event, "providers": providers} if event["type"] == "family" else event for event in warm_and_serve(PREFILL)
    ]
    findings = stale_codes(analyse(events, PREFILL.rules(), FP8_CONTEXT))
    assert [f.message for f in findings] == (
        [
            "synthetic_prefill is installed by mlacheck-fork 0.1.0, not by mlacheck, the distribution this rule was written "
            "for: its key layout and cache may differ"
        ]
        if stale
        else []
    )


def test_the_fingerprint_follows_the_source_and_signature_of_the_key_functions(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    sources = {
        "kernel_v1": "def dispatch(q, causal=True):\n    return (q, causal)\n",
        "kernel_v1_copy": "def dispatch(q, causal=True):\n    return (q, causal)\n",
        "kernel_v2": "def dispatch(q, causal=True):\n    return (q, not causal)\n",
        "kernel_v3": "def dispatch(q, causal=False):\n    return (q, causal)\n",
    }
    prints = {}
    for name, source in sources.items():
        (tmp_path / f"{name}.py").write_text(source)
        prints[name] = fingerprint(__import__(name), ["dispatch"])
    assert prints["kernel_v1"] == prints["kernel_v1_copy"]
    assert len({prints["kernel_v1"], prints["kernel_v2"], prints["kernel_v3"]}) == 3


# -- typed keys ---------------------------------------------------------------------------------------------


def test_key_values_are_typed_once_when_captured():
    assert typed(torch.float8_e4m3fn) == "float8_e4m3fn"
    assert typed(synthetic_cute.Float8E4M3FN) == "Float8E4M3FN"
    assert typed((128, (1, True), None)) == [128, [1, True], None]
    assert [type(typed(value)) for value in (True, 3, 2.5, "x")] == [bool, int, float, str]
    assert (
        key_text({"tile": [128], "causal": False, "dtype": "float8_e4m3fn"}, ["dtype", "causal", "tile"])
        == "(dtype=float8_e4m3fn, causal=False, tile=(128,))"
    )


def test_a_key_field_that_differs_only_in_a_tuple_is_diffed_as_lists():
    with observe(FA4) as capture:
        synthetic_fa4.precompile(FP8, 192, causal=True, tile=(64, 64))
        FA4.dispatch(1, FP8, True)
    [serving] = [f for f in analyse(capture.sink.events, FA4.rules(), FP8_CONTEXT).findings if f.code == "MLA001"]
    assert serving.diff == {"tile": [[64, 64], [128, 128]]}
    assert "tile (precompiled (64, 64), dispatched (128, 128))" in serving.message


# -- format 1 -----------------------------------------------------------------------------------------------

FORMAT_1 = [
    {"type": "run", "format_version": 1, "pid": 7, "mlacheck_version": "0.0.9", "started": 0.0},
    {"type": "family", "family": "synthetic.prefill", "version": "0.1.0", "key_fields": list(PREFILL.fields)},
    {
        "type": "compile",
        "family": "synthetic.prefill",
        "key": ["bfloat16", "192", "True", "False"],
        "phase": "precompile",
        "seconds": 1.5,
        "site": "warm.py:3",
    },
    {
        "type": "compile",
        "family": "synthetic.prefill",
        "key": ["float8_e4m3fn", "192", "True", "False"],
        "phase": "dispatch",
        "seconds": 2.5,
        "site": "serve.py:9",
    },
    *[{"type": "dispatch", "family": "synthetic.prefill", "key": ["float8_e4m3fn", "192", "True", "False"]}] * 3,
    {"type": "exit", "rank": 0},
]


def write_trace(path, events):
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    return path


def test_a_format_1_trace_reads_as_format_2(tmp_path):
    trace = read_trace(write_trace(tmp_path / "trace-7.jsonl", FORMAT_1))
    assert trace.format_version == 1 and not trace.truncated
    assert [e["type"] for e in trace.events] == ["run", "family", "compile", "compile", "dispatch", "counts", "exit"]
    warm, serve = of_type(trace.events, "compile")
    assert (warm["phase"], warm["key"]) == ("warmup", PREFILL.key(BF16, True))
    assert (serve["phase"], serve["key"], serve["vid"]) == ("serving", PREFILL.key(FP8, True), 1)
    assert of_type(trace.events, "counts") == [
        {"type": "counts", "family": "synthetic.prefill", "dispatches": {"1:serving": 3}, "calls": {}, "final": True}
    ]

    analysis = analyse(trace.events, PREFILL.rules(), FP8_CONTEXT)
    assert [f.code for f in analysis.findings] == ["MLA001", "MLA003", "MLA002"]
    serving = analysis.findings[0]
    assert serving.nearest == PREFILL.key(BF16, True) and serving.diff == {"q_dtype": ["bfloat16", "float8_e4m3fn"]}
    assert "a 2.5 s stall" in serving.message and serving.site == "serve.py:9"
    fp8 = next(v for v in analysis.families[0].variants if v.key == PREFILL.key(FP8, True))
    assert (fp8.dispatches, fp8.at_least) == (3, False)


def test_a_format_1_trace_of_a_killed_process_counts_at_least(tmp_path):
    events = upgrade_format_1(FORMAT_1[:-1])
    assert of_type(events, "counts")[0]["final"] is False
    fp8 = next(
        v for v in analyse(events, PREFILL.rules(), FP8_CONTEXT).families[0].variants if v.key == PREFILL.key(FP8, True)
    )
    assert (fp8.dispatches, fp8.at_least) == (3, True)


def test_worst_metrics_keep_nan_and_tolerate_a_missing_lse():
    from mlacheck.analysis.figures import worst

    decode = {"max_abs_err": 0.1, "max_rel_err": 0.01, "cosine_similarity": 0.999, "lse_max_abs_err": None}
    other = {"max_abs_err": 0.2, "max_rel_err": float("nan"), "cosine_similarity": 0.998, "lse_max_abs_err": None}
    merged = worst(decode, other)
    assert merged["max_abs_err"] == 0.2 and merged["cosine_similarity"] == 0.998 and merged["lse_max_abs_err"] is None
    assert merged["max_rel_err"] != merged["max_rel_err"]
    assert worst(None, decode) == decode
