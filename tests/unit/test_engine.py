"""The capture engine and the analysis on the synthetic family: phases, nearest match, diff, costs, verdicts."""

import pytest

from mlacheck.analysis import analyse
from mlacheck.capture import FamilyCapture, RecordingCache, SkippedCompile
from mlacheck.events import MemorySink

CONTEXT = {"kv_cache_dtype": "fp8"}


def capture_run(rule, program, compile_policy="real", launch=None):
    sink = MemorySink()
    capture = FamilyCapture(rule.family, sink, compile_policy, launch)
    capture.install()
    try:
        program()
    finally:
        capture.remove()
    return sink.events


def test_compile_inside_dispatch_is_serving_path_and_warmup_is_precompile(synthetic_rule, synthetic):
    def program():
        synthetic.warmup(dtypes=("fp8",), causal=(True,))
        synthetic.dispatch(1, "fp8", True)
        synthetic.dispatch(1, "fp8", False)

    events = capture_run(synthetic_rule, program)
    compiles = {tuple(e["key"]): e for e in events if e["type"] == "compile"}
    assert compiles[("fp8", "True")]["phase"] == "precompile"
    assert compiles[("fp8", "False")]["phase"] == "dispatch"
    assert compiles[("fp8", "True")]["site"].startswith("tests/fixtures/synthetic_kernels.py:")
    assert all(e["seconds"] >= synthetic.COMPILE_SECONDS for e in compiles.values())
    assert [tuple(e["key"]) for e in events if e["type"] == "dispatch"] == [("fp8", "True"), ("fp8", "False")]


def test_serving_path_compile_names_nearest_precompiled_and_diff(synthetic_rule, synthetic):
    def program():
        synthetic.warmup(dtypes=("bf16",), causal=(True, False))
        synthetic.dispatch(1, "fp8", True)

    analysis = analyse(capture_run(synthetic_rule, program), [synthetic_rule], {})
    [serving] = [f for f in analysis.findings if f.code == "MLA001"]
    assert serving.key == {"dtype": "fp8", "causal": "True"}
    assert serving.nearest == {"dtype": "bf16", "causal": "True"}
    assert serving.diff == {"dtype": ["bf16", "fp8"]}
    assert "dtype=fp8" in serving.hint
    variant = next(v for v in analysis.families[0].variants if v.key == serving.key)
    assert variant.serving_path_compile_s >= synthetic.COMPILE_SECONDS
    dead = sorted(f.key["causal"] for f in analysis.findings if f.code == "MLA002")
    assert dead == ["False", "True"]
    assert analysis.failed()


def test_dead_warmup_alone_passes_unless_strict(synthetic_rule, synthetic):
    def program():
        synthetic.warmup(dtypes=("fp8",), causal=(True, False))
        synthetic.dispatch(1, "fp8", True)

    analysis = analyse(capture_run(synthetic_rule, program), [synthetic_rule], CONTEXT)
    assert [f.code for f in analysis.findings] == ["MLA002"]
    assert "s of compile wasted" in analysis.findings[0].message
    assert not analysis.failed()
    assert analysis.failed(strict=True)


def test_clean_run_has_no_findings(synthetic_rule, synthetic):
    def program():
        synthetic.warmup(dtypes=("fp8",), causal=(True,))
        for _ in range(3):
            synthetic.dispatch(1, "fp8", True)

    analysis = analyse(capture_run(synthetic_rule, program), [synthetic_rule], CONTEXT)
    assert analysis.findings == []
    [variant] = analysis.families[0].variants
    assert (variant.precompiled, variant.dispatches, variant.status) == (True, 3, "ok")


def test_saved_reference_to_dispatch_function_still_counts_as_dispatch(synthetic_rule, synthetic):
    saved = synthetic.dispatch  # taken before the capture is installed, as an engine's re-export is

    def program():
        saved(1, "fp8", True)

    events = capture_run(synthetic_rule, program)
    assert [e["phase"] for e in events if e["type"] == "compile"] == ["dispatch"]


def test_remove_restores_the_original_dict_with_compiled_entries(synthetic_rule, synthetic):
    original_cache, original_compile = synthetic._cache, synthetic.compile_variant
    capture_run(synthetic_rule, lambda: synthetic.warmup(causal=(True,)))
    assert synthetic._cache is original_cache and type(synthetic._cache) is dict
    assert synthetic.compile_variant is original_compile
    assert isinstance(original_cache[("fp8", True)], synthetic.Kernel)


def test_skip_policy_records_keys_without_compiling_and_leaves_no_stand_in(synthetic_rule, synthetic):
    events = capture_run(synthetic_rule, lambda: synthetic.warmup(causal=(True,)), compile_policy="skip")
    assert [e["seconds"] for e in events if e["type"] == "compile"] == [None]
    assert not any(isinstance(v, SkippedCompile) for v in synthetic._cache.values())
    assert synthetic._cache == {}


def test_launch_policy_replaces_only_what_dispatch_gets(synthetic_rule, synthetic):
    calls = []

    def stand_in(key, kernel):
        assert key == ["fp8", "True"]
        return lambda x: calls.append(x) or "replaced"

    results = []
    capture_run(synthetic_rule, lambda: (synthetic.warmup(causal=(True,)), results.append(synthetic.dispatch(3))),
                launch=stand_in)
    assert results == ["replaced"] and calls == [3]
    assert synthetic._cache[("fp8", True)].launches == 0


def test_observed_program_computes_the_same_with_capture(synthetic_rule, synthetic):
    synthetic.warmup()
    without = [synthetic.dispatch(x, "fp8", x % 2 == 0) for x in range(5)]
    synthetic.reset()
    with_capture = []
    capture_run(synthetic_rule, lambda: (synthetic.warmup(), with_capture.extend(synthetic.dispatch(x, "fp8", x % 2 == 0) for x in range(5))))
    assert with_capture == without


def test_a_failing_sink_never_breaks_the_program(synthetic_rule, synthetic):
    class BrokenSink:
        def write(self, event):
            if event["type"] != "family":
                raise OSError("disk full")

        def close(self):
            pass

    capture = FamilyCapture(synthetic_rule.family, BrokenSink())
    capture.install()
    try:
        synthetic.warmup(causal=(True,))
        assert synthetic.dispatch(21) == 42
    finally:
        capture.remove()


def test_writes_through_a_reference_taken_before_install_are_reported(synthetic_rule, synthetic):
    stale = synthetic._cache

    def program():
        stale[("fp8", True)] = synthetic.Kernel("fp8", True)

    events = capture_run(synthetic_rule, program)
    [error] = [e for e in events if e["type"] == "internal_error"]
    assert "reference taken before mlacheck was installed" in error["message"]


def test_recording_cache_is_a_dict_to_the_program(synthetic_rule, synthetic):
    capture = FamilyCapture(synthetic_rule.family, MemorySink())
    capture.install()
    try:
        assert isinstance(synthetic._cache, RecordingCache) and isinstance(synthetic._cache, dict)
        synthetic._cache.setdefault(("x", True), 1)
        assert synthetic._cache.get(("x", True)) == 1 and synthetic._cache.get("missing", 7) == 7
    finally:
        capture.remove()


def test_contract_applies_only_where_the_context_matches(synthetic_rule, synthetic):
    events = capture_run(synthetic_rule, lambda: (synthetic.warmup(dtypes=("bf16",), causal=(True,)), synthetic.dispatch(1, "bf16")))
    assert [f.code for f in analyse(events, [synthetic_rule], CONTEXT).findings] == ["MLA003"]
    assert analyse(events, [synthetic_rule], {"kv_cache_dtype": "bf16"}).findings == []
    assert analyse(events, [synthetic_rule], {}).findings == []


def test_key_with_other_fields_than_the_rule_is_a_stale_rule(synthetic_rule):
    events = [
        {"type": "family", "family": "synthetic", "version": "0.1.0", "key_fields": ["dtype", "causal"]},
        {"type": "compile", "family": "synthetic", "key": ["fp8", "True", "extra"], "phase": "precompile", "seconds": 1.0, "site": "x:1"},
        {"type": "dispatch", "family": "synthetic", "key": ["fp8", "True", "extra"]},
    ]
    [finding] = analyse(events, [synthetic_rule], CONTEXT).findings
    assert finding.code == "MLA004" and "3 fields" in finding.message
    assert finding.key == {"dtype": "fp8", "causal": "True", "field2": "extra"}


@pytest.mark.parametrize("version, stale", [("0.1.0", False), ("0.0.9", True), (None, True)])
def test_installed_version_outside_checked_versions_is_a_stale_rule(synthetic_rule, version, stale):
    events = [{"type": "family", "family": "synthetic", "version": version, "key_fields": ["dtype", "causal"]}]
    codes = [f.code for f in analyse(events, [synthetic_rule], CONTEXT).findings]
    assert codes == (["MLA004"] if stale else [])
