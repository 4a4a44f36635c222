"""Capture and analysis on the synthetic cache kinds: phases, serving start, nearest match, dispatch accounting.

Every test runs once per cache kind: a module-global dict (prefill), a dict reached by a dotted path and looked up
with `in` (fa4), a functools.cache function (decode), a dict in a decorator's closure (closure, SGLang's cache_once)
and a dict held by a class attribute, looked up by a method (classdict, SGLang's DSA indexer runner).
"""

import pytest

from mlacheck.analysis import analyse
from tests.fixtures.synthetic_harness import (
    BF16,
    DECODE,
    ENGINE,
    FP8,
    FP8_CONTEXT,
    mark_serving_start,
    observe,
    of_type,
    q,
    synthetic_cute,
    synthetic_decode,
)


def variant_of(analysis, key):
    [family] = analysis.families
    return next(v for v in family.variants if v.key == key)


def codes(analysis):
    return sorted(finding.code for finding in analysis.findings)


def test_precompiled_then_dispatched_is_ok(kind):
    with observe(kind) as capture:
        kind.precompile(FP8, True)
        results = [kind.dispatch(x, FP8, True) for x in (1, 2, 3)]
    assert results == [2, 4, 6]
    [compiled] = of_type(capture.sink.events, "compile")
    assert (compiled["phase"], compiled["origin"], compiled["key"]) == ("warmup", "compile", kind.key(FP8, True))
    assert compiled["seconds"] >= synthetic_cute.COMPILE_SECONDS
    analysis = analyse(capture.sink.events, kind.rules(), FP8_CONTEXT)
    assert analysis.findings == [] and analysis.incomplete == []
    variant = variant_of(analysis, kind.key(FP8, True))
    assert (variant.precompiled, variant.dispatches, variant.status) == (True, 3, "ok")


def test_serving_path_compile_names_the_nearest_precompiled_variant_and_the_diff(kind):
    with observe(kind) as capture:
        kind.precompile(BF16, True)
        kind.precompile(BF16, False)
        assert kind.dispatch(5, FP8, True) == 10
    analysis = analyse(capture.sink.events, kind.rules(), {})
    [serving] = [f for f in analysis.findings if f.code == "MLA001"]
    assert serving.key == kind.key(FP8, True)
    assert serving.nearest == kind.key(BF16, True)
    assert serving.diff == {kind.dtype_field: [kind.dtype_text[BF16], kind.dtype_text[FP8]]}
    assert f"{kind.dtype_field}={kind.dtype_text[FP8]}" in serving.hint
    variant = variant_of(analysis, serving.key)
    assert variant.status == "serving-path compile"
    assert variant.serving_path_compile_s >= synthetic_cute.COMPILE_SECONDS
    dead = [f.key for f in analysis.findings if f.code == "MLA002"]
    assert sorted(dead, key=str) == sorted([kind.key(BF16, True), kind.key(BF16, False)], key=str)
    assert analysis.failed()


def test_a_dispatch_under_a_capture_frame_is_captured_never_dead_warmup(kind):
    with observe(kind) as capture:
        kind.precompile(FP8, False)
        ENGINE.capture_graphs(lambda: kind.dispatch(1, FP8, True), lambda: kind.dispatch(1, FP8, False))
    assert [(e["key"], e["phase"]) for e in of_type(capture.sink.events, "compile")] == [
        (kind.key(FP8, False), "warmup"),
        (kind.key(FP8, True), "capture"),
    ]
    assert {e["phase"] for e in of_type(capture.sink.events, "dispatch")} == {"capture"}
    analysis = analyse(capture.sink.events, kind.rules(), FP8_CONTEXT)
    assert analysis.findings == []
    assert [variant_of(analysis, kind.key(FP8, flag)).status for flag in (True, False)] == ["captured", "captured"]


def test_a_dispatch_under_a_warmup_frame_precompiles(kind):
    with observe(kind) as capture:
        ENGINE.warm_up(lambda: kind.dispatch(1, FP8, True))
        kind.dispatch(1, FP8, True)
    [compiled] = of_type(capture.sink.events, "compile")
    assert compiled["phase"] == "warmup"
    analysis = analyse(capture.sink.events, kind.rules(), FP8_CONTEXT)
    assert analysis.findings == []
    variant = variant_of(analysis, kind.key(FP8, True))
    assert (variant.warmup_dispatches, variant.dispatches, variant.status) == (1, 1, "ok")


def test_compiles_before_serving_start_are_warmup(kind):
    def program(capture, mark):
        kind.dispatch(1, FP8, True)  # an engine's own warm-up, through the dispatch, in no declared frame
        if mark:
            mark_serving_start(capture)
        kind.dispatch(1, FP8, True)
        kind.dispatch(1, FP8, True)
        kind.dispatch(1, FP8, False)

    with observe(kind) as unmarked:
        program(unmarked, mark=False)
    kind.reset()
    with observe(kind) as marked:
        program(marked, mark=True)
    before = analyse(unmarked.sink.events, kind.rules(), FP8_CONTEXT)
    assert [f.key for f in before.findings if f.code == "MLA001"] == [kind.key(FP8, True), kind.key(FP8, False)]
    analysis = analyse(marked.sink.events, kind.rules(), FP8_CONTEXT)
    assert [(f.code, f.key) for f in analysis.findings] == [("MLA001", kind.key(FP8, False))]
    variant = variant_of(analysis, kind.key(FP8, True))
    assert (variant.compile_phase, variant.warmup_dispatches, variant.dispatches, variant.status) == (
        "warmup",
        1,
        2,
        "ok",
    )


def test_dispatches_that_raise_before_the_lookup_are_counted_and_leave_the_run_incomplete(kind):
    with observe(kind) as capture:
        kind.precompile(FP8, True)
        for _ in range(2):
            with pytest.raises(ValueError, match="no input"):
                kind.dispatch(None, FP8, True)
    [error] = of_type(capture.sink.events, "dispatch_error")
    assert (error["function"], error["error"], error["reached_lookup"]) == (kind.dispatch_function, "ValueError", False)
    assert of_type(capture.sink.events, "counts")[-1]["calls"] == {
        kind.dispatch_function: 2,
        f"{kind.dispatch_function}!before": 2,
    }
    analysis = analyse(capture.sink.events, kind.rules(), FP8_CONTEXT)
    assert analysis.findings == []  # not MLA002: no dispatch got far enough to check the warm-up
    assert variant_of(analysis, kind.key(FP8, True)).status == "unverified"
    assert analysis.incomplete == [
        f"{kind.family}: 2 of 2 {kind.dispatch_function} call(s) raised before the cache "
        "lookup (ValueError: no input), so they checked nothing"
    ]
    assert (analysis.families[0].dispatch_calls, analysis.families[0].died_before_lookup) == (2, 2)


def test_dispatches_that_return_without_the_lookup_leave_the_run_incomplete():
    # The rule says every tokenspeed_mla_decode call looks the cache up; one that takes another branch (as
    # 2.0.x's SM107 FP8-output decode does, through a cache of its own) ran a variant nothing checked.
    with observe(DECODE) as capture:
        DECODE.precompile(FP8, True)
        DECODE.dispatch(1, FP8, True)
        for _ in range(3):
            synthetic_decode.tokenspeed_mla_decode(q(1), out_dtype="fp8")
    [event] = of_type(capture.sink.events, "no_lookup")
    assert event["function"] == "tokenspeed_mla_decode" and event["site"].startswith("tests/unit/test_engine.py:")
    assert of_type(capture.sink.events, "counts")[-1]["calls"] == {
        "tokenspeed_mla_decode": 4,
        "tokenspeed_mla_decode!nolookup": 3,
    }
    analysis = analyse(capture.sink.events, DECODE.rules(), FP8_CONTEXT)
    assert analysis.findings == []
    [reason] = analysis.incomplete
    assert reason.startswith(
        "synthetic.decode: 3 of 4 tokenspeed_mla_decode call(s) returned without looking the cache "
        "up (first at tests/unit/test_engine.py:"
    )


def test_where_a_call_may_legitimately_skip_the_lookup_the_rule_leaves_the_check_off():
    # FA4's _flash_attn_fwd returns early for an empty batch: its rule does not say every call looks up.
    rule = DECODE.rule()
    lenient = DECODE.rules(
        rule.model_copy(update={"family": rule.family.model_copy(update={"every_call_looks_up": False})})
    )
    with observe(DECODE, rules=lenient) as capture:
        DECODE.precompile(FP8, True)
        DECODE.dispatch(1, FP8, True)
        synthetic_decode.tokenspeed_mla_decode(q(1), out_dtype="fp8")
    assert of_type(capture.sink.events, "no_lookup") == []
    assert analyse(capture.sink.events, lenient, FP8_CONTEXT).incomplete == []


def test_a_dispatch_that_raises_after_the_lookup_was_checked(kind):
    with observe(kind) as capture:
        kind.precompile(FP8, True)
        with pytest.raises(RuntimeError, match="launch failed"):
            kind.dispatch(-1, FP8, True)  # the slow path's first lookup
        assert kind.dispatch(1, FP8, True) == 2
        with pytest.raises(RuntimeError, match="launch failed"):
            kind.dispatch(-1, FP8, True)  # a fast-path lookup
    [error] = of_type(capture.sink.events, "dispatch_error")  # the first of its kind
    assert error["reached_lookup"] is True
    assert of_type(capture.sink.events, "counts")[-1]["calls"] == {
        kind.dispatch_function: 3,
        f"{kind.dispatch_function}!after": 2,
    }
    analysis = analyse(capture.sink.events, kind.rules(), FP8_CONTEXT)
    assert analysis.findings == [] and analysis.incomplete == []
    assert variant_of(analysis, kind.key(FP8, True)).dispatches == 3


def test_a_run_with_no_dispatch_is_incomplete_and_its_warmup_unverified(kind):
    with observe(kind) as capture:
        kind.precompile(FP8, True)
    analysis = analyse(capture.sink.events, kind.rules(), FP8_CONTEXT)
    assert analysis.findings == []
    assert variant_of(analysis, kind.key(FP8, True)).status == "unverified"
    assert analysis.incomplete == [
        f"{kind.family}: loaded, but no dispatch call reached the cache lookup: the warm-up "
        "was never compared with a dispatch"
    ]


def test_counts_are_exact_and_a_long_trace_stays_as_small_as_its_variants(kind):
    with observe(kind) as capture:
        kind.precompile(FP8, True)
        total = sum(kind.dispatch(1, FP8, True) for _ in range(10_000))
    assert total == 20_000
    events = capture.sink.events
    assert [e["type"] for e in events] == ["family", "compile_start", "compile_end", "compile", "dispatch", "counts"]
    [counts] = of_type(events, "counts")
    vid = of_type(events, "compile")[0]["vid"]
    assert counts["final"] and counts["dispatches"] == {f"{vid}:serving": 10_000}
    assert counts["calls"] == {kind.dispatch_function: 10_000}
    assert variant_of(analyse(events, kind.rules(), FP8_CONTEXT), kind.key(FP8, True)).dispatches == 10_000


def test_the_observed_program_computes_the_same_with_and_without_capture(kind):
    def program():
        kind.precompile(FP8, True)
        return [kind.dispatch(x, FP8, x % 2 == 0) for x in range(6)] + [kind.dispatch(7, BF16, True)]

    without = program()
    compiled_without = list(synthetic_cute.compiled)
    kind.reset()
    with observe(kind):
        with_capture = program()
    assert with_capture == without == [0, 2, 4, 6, 8, 10, 14]
    assert synthetic_cute.compiled == compiled_without
    assert kind.cached_count() == 3  # the module's own cache holds every variant compiled during the run


def test_contracts_apply_only_where_the_context_matches(kind):
    with observe(kind) as capture:
        kind.precompile(BF16, True)
        kind.dispatch(1, BF16, True)
    events = capture.sink.events
    [broken] = analyse(events, kind.rules(), FP8_CONTEXT).findings
    assert (broken.code, broken.key) == ("MLA003", kind.key(BF16, True))
    assert f"{kind.dtype_field} is {kind.dtype_text[BF16]}" in broken.message
    assert analyse(events, kind.rules(), {"kv_cache_dtype": "float16"}).findings == []
    unknown = analyse(events, kind.rules(), {})
    assert unknown.findings == [] and "kv_cache_dtype" in unknown.not_checked[0]
