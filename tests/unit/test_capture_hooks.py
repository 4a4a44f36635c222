"""What capture does to the observed program, per cache kind: --compile skip, the launch policy, a failing sink,
references taken before install, the cache's own behaviour, typed keys and where a site lands."""

import functools
import json
import sys
from pathlib import Path

import pytest

from mlacheck.analysis import analyse
from mlacheck.capture import CapturePolicy, SkippedCompile
from mlacheck.capture.caches.recording import RecordingDict
from mlacheck.errors import MlacheckError
from mlacheck.rulefiles import load_rules
from mlacheck.sinks import JsonlSink, MemorySink
from mlacheck.trace import read_trace
from tests.fixtures.synthetic_harness import (
    BF16,
    DECODE,
    DICT_KINDS,
    FA4,
    FP8,
    FP8_CONTEXT,
    family_capture,
    mark_serving_start,
    observe,
    of_type,
    q,
    synthetic_cute,
    synthetic_decode,
    synthetic_fa4,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(params=DICT_KINDS, ids=lambda kind: kind.name)
def dict_kind(request):
    return request.param


@pytest.fixture
def decode():
    return DECODE


def module_cache(kind):
    """A dict kind's own dict cache, as the program reaches it now."""
    return kind.own_cache()


def warmed_up(kind):
    """What the cache holds for the warm-up's variant (FP8, True), reached outside any dispatch."""
    if kind is DECODE:
        return synthetic_decode._kernel(FP8, 16, 1, True)
    return next(iter(module_cache(kind).values()))


def test_compile_skip_records_keys_compiles_nothing_and_leaves_the_cache_empty(kind):
    with observe(kind, CapturePolicy(compile="skip")) as capture:
        kind.precompile(FP8, True)
        assert isinstance(warmed_up(kind), SkippedCompile)
        with pytest.raises(RuntimeError, match="--compile skip"):  # a skipped variant cannot launch
            kind.dispatch(1, FP8, False)
    compiles = of_type(capture.sink.events, "compile")
    assert [(e["key"], e["phase"], e["origin"], e["seconds"]) for e in compiles] == [
        (kind.key(FP8, True), "warmup", "skip", None),
        (kind.key(FP8, False), "serving", "skip", None),
    ]
    assert synthetic_cute.compiled == []
    assert kind.cached_count() == 0
    [serving] = [f for f in analyse(capture.sink.events, kind.rules(), FP8_CONTEXT).findings if f.code == "MLA001"]
    assert "not measured: --compile skip" in serving.message


def test_the_launch_policy_replaces_only_what_the_dispatch_gets(kind):
    launched = []

    def stand_in(key, kernel):
        launched.append((key, kernel))
        return lambda tensor: ("replaced", tensor.value)

    with observe(kind, launch=stand_in):
        kind.precompile(FP8, True)
        results = [kind.dispatch(x, FP8, True) for x in (1, 2, 3)] + [kind.dispatch(4, FP8, False)]
    assert results == [("replaced", 1), ("replaced", 2), ("replaced", 3), ("replaced", 4)]
    assert [key for key, _ in launched] == [kind.key(FP8, True), kind.key(FP8, False)]
    assert all(isinstance(kernel, synthetic_cute.Kernel) and kernel.launches == 0 for _, kernel in launched)
    assert kind.cached_count() == 2
    kind.precompile(FP8, True)  # the real kernels stayed in the cache: no recompile
    assert len(synthetic_cute.compiled) == 2


def test_the_warmup_gets_the_real_kernel_under_a_launch_policy(kind):
    with observe(kind, launch=lambda key, kernel: "stand-in"):
        kind.precompile(FP8, True)
        assert isinstance(warmed_up(kind), synthetic_cute.Kernel)


class BrokenSink:
    """A sink whose disk is full, from the event `after` on."""

    def __init__(self, after=1):
        self.written, self.after = 0, after

    def write(self, event):
        self.written += 1
        if self.written > self.after:
            raise OSError("disk full")

    def close(self):
        pass


def test_a_failing_sink_never_breaks_the_program(kind):
    with observe(kind, CapturePolicy(flush_seconds=0), sink=BrokenSink()):  # every lookup tries to write counts
        kind.precompile(FP8, True)
        results = [kind.dispatch(x, FP8, True) for x in range(3)] + [kind.dispatch(5, BF16, True)]
        with pytest.raises(ValueError, match="no input"):
            kind.dispatch(None, FP8, True)
    assert results == [0, 2, 4, 10]
    assert kind.cached_count() == 2


def test_a_failing_sink_does_not_let_a_replaced_launch_run(kind):
    with observe(kind, launch=lambda key, kernel: lambda tensor: "replaced", sink=BrokenSink()):
        kind.precompile(FP8, True)
        assert [kind.dispatch(1, FP8, True), kind.dispatch(1, FP8, False)] == ["replaced", "replaced"]


def assert_untouched(kind, before):
    assert {name: getattr(kind.module, name) for name in before} == before
    if kind is not DECODE:
        assert type(module_cache(kind)) is dict
    assert not hasattr(synthetic_cute.compile, "__wrapped__")
    kind.precompile(FP8, True)
    assert kind.dispatch(2, FP8, True) == 4


def test_an_install_whose_sink_fails_leaves_the_module_as_it_was(kind):
    before = {name: getattr(kind.module, name) for name in vars(kind.module) if not name.startswith("__")}
    capture = family_capture(kind, BrokenSink(after=0))
    with pytest.raises(OSError):
        capture.install()
    assert_untouched(kind, before)


def test_an_install_refused_by_a_stale_rule_leaves_the_module_as_it_was(kind):
    before = {name: getattr(kind.module, name) for name in vars(kind.module) if not name.startswith("__")}
    rule = kind.rule()
    stale = rule.model_copy(
        update={"family": rule.family.model_copy(update={"compile": "gone"})}
    )  # found after the cache
    capture = family_capture(kind, MemorySink(), rules=kind.rules(stale))
    with pytest.raises(MlacheckError, match="has no 'gone' where the rule looks"):
        capture.install()
    assert_untouched(kind, before)


def test_typed_keys_in_events_survive_the_trace_file(kind, tmp_path):
    path = tmp_path / "trace.jsonl"
    sink = JsonlSink(path)
    sink.write({"type": "run", "format_version": 2, "pid": 1})
    with observe(kind, sink=sink):
        kind.precompile(FP8, True)
        kind.dispatch(1, FP8, True)
    sink.close()
    events = read_trace(path).events
    [compiled], [dispatched] = of_type(events, "compile"), of_type(events, "dispatch")
    assert compiled["key"] == dispatched["key"] == kind.key(FP8, True)
    assert list(compiled["key"]) == list(kind.fields)
    assert {name: type(value) for name, value in compiled["key"].items()} == {
        name: type(value) for name, value in kind.key(FP8, True).items()
    }
    assert analyse(events, kind.rules(), FP8_CONTEXT).findings == []


def test_a_tuple_and_a_dtype_class_in_a_key_are_a_list_and_the_class_name():
    with observe(FA4) as capture:
        synthetic_fa4.precompile(BF16, 64, causal=True, tile=(64, 32))
    [compiled] = of_type(capture.sink.events, "compile")
    assert json.loads(json.dumps(compiled["key"])) == {
        "dtype": "BFloat16",
        "head_dim": 64,
        "causal": True,
        "tile": [64, 32],
    }


def test_a_site_lands_in_the_code_that_called_through_the_wrappers(kind):
    line = sys._getframe().f_lineno
    with observe(kind) as capture:
        kind.wrapper(q(1), **{kind.flag_argument: True})  # line + 2
    [compiled] = of_type(capture.sink.events, "compile")
    assert compiled["phase"] == "serving"  # the wrapper's reference was taken before install: still a dispatch
    assert compiled["site"] == f"tests/unit/test_capture_hooks.py:{line + 2}"
    assert compiled["stack"][0].startswith(f"tests/unit/test_capture_hooks.py:{line + 2} ")
    assert not any("synthetic_wrappers" in frame or "mlacheck/" in frame for frame in compiled["stack"])


def test_without_site_skip_the_site_is_the_wrapper(kind):
    rule = kind.rule()
    unskipped = rule.model_copy(update={"family": rule.family.model_copy(update={"site_skip": []})})
    with observe(kind, rules=kind.rules(unskipped)) as capture:
        kind.wrapper(q(1), **{kind.flag_argument: True})
    [compiled] = of_type(capture.sink.events, "compile")
    assert compiled["site"].startswith("tests/fixtures/synthetic_wrappers.py:")


def test_a_precompile_site_is_the_caller_of_the_kernels_warmup(kind):
    line = sys._getframe().f_lineno
    with observe(kind) as capture:
        kind.precompile(FP8, True)  # line + 2, through a lambda in the harness: the first frame outside the kernel
    [compiled] = of_type(capture.sink.events, "compile")
    assert compiled["site"].startswith("tests/fixtures/synthetic_harness.py:")
    assert compiled["stack"][1].startswith(f"tests/unit/test_capture_hooks.py:{line + 2} ")


# -- dict caches (kinds a and b) --------------------------------------------------------------------------


def test_the_recording_cache_is_a_dict_to_the_program(dict_kind):
    with observe(dict_kind) as capture:
        cache = module_cache(dict_kind)
        assert isinstance(cache, RecordingDict) and isinstance(cache, dict)
        assert cache.setdefault("a", 1) == 1 and cache.setdefault("a", 2) == 1
        assert cache.get("a") == 1 and cache.get("missing", 7) == 7
        cache.update({"b": 2}, c=3)
        cache |= {"d": 4}
        assert cache.pop("b") == 2 and cache.pop("missing", None) is None
        del cache["c"]
        assert dict(cache) == {"a": 1, "d": 4} and "a" in cache and len(cache) == 2
    assert module_cache(dict_kind) == {"a": 1, "d": 4} and type(module_cache(dict_kind)) is dict
    assert [e["key"] for e in of_type(capture.sink.events, "compile")] == [
        {dict_kind.fields[0]: name} for name in ("a", "b", "c", "d")
    ]
    assert of_type(capture.sink.events, "internal_error") == []


def test_popping_a_variant_retires_it_so_it_compiles_again(dict_kind):
    with observe(dict_kind) as capture:
        dict_kind.precompile(FP8, True)
        dict_kind.dispatch(1, FP8, True)
        dict_kind.dispatch(1, FP8, True)  # fast path from now on
        module_cache(dict_kind).pop(next(iter(module_cache(dict_kind))))
        assert dict_kind.dispatch(1, FP8, True) == 2
    assert [e["phase"] for e in of_type(capture.sink.events, "compile")] == ["warmup", "serving"]
    assert dict_kind.cached_count() == 1


def test_entries_cached_before_install_are_preexisting(dict_kind):
    dict_kind.precompile(FP8, True)
    with observe(dict_kind) as capture:
        dict_kind.dispatch(1, FP8, True)
    assert of_type(capture.sink.events, "family")[0]["preexisting"] == 1
    [compiled] = of_type(capture.sink.events, "compile")
    assert (compiled["phase"], compiled["key"], compiled["site"]) == (
        "preexisting",
        dict_kind.key(FP8, True),
        "before mlacheck",
    )
    assert analyse(capture.sink.events, dict_kind.rules(), FP8_CONTEXT).findings == []


def test_a_preexisting_entry_popped_during_the_run_stays_popped(dict_kind):
    dict_kind.precompile(FP8, True)
    dict_kind.precompile(FP8, False)
    first = next(iter(module_cache(dict_kind)))
    with observe(dict_kind) as capture:
        module_cache(dict_kind).pop(first)
    assert first not in module_cache(dict_kind) and dict_kind.cached_count() == 1
    assert of_type(capture.sink.events, "internal_error") == []


def test_writes_through_a_reference_taken_before_install_are_unseen(dict_kind):
    stale = module_cache(dict_kind)
    with observe(dict_kind) as capture:
        stale["written past mlacheck"] = synthetic_cute.Kernel(())
    [unseen] = of_type(capture.sink.events, "unseen")
    assert (
        "1 variant(s) entered" in unseen["what"] and "reference taken before mlacheck was installed" in unseen["what"]
    )
    assert "written past mlacheck" in unseen["what"]  # the key is named
    assert "written past mlacheck" in module_cache(dict_kind)
    # what capture missed leaves the check incomplete, never a pass
    assert (
        f"{dict_kind.family}: {unseen['what']}"
        in analyse(capture.sink.events, dict_kind.rules(), FP8_CONTEXT).incomplete
    )


def test_installing_twice_is_refused(dict_kind):
    with observe(dict_kind):
        with pytest.raises(MlacheckError, match="already being recorded"):
            family_capture(dict_kind, MemorySink()).install()


# -- functools caches (kind c) ----------------------------------------------------------------------------


def test_one_key_under_two_spellings_is_compiled_twice(decode):
    with observe(decode) as capture:
        synthetic_decode.warmup_decode_positional(FP8)  # positional: another entry than the dispatch's keywords
        decode.dispatch(1, FP8, True)
    compiles = of_type(capture.sink.events, "compile")
    assert [(e["key"], e["phase"]) for e in compiles] == [
        (decode.key(FP8, True), "warmup"),
        (decode.key(FP8, True), "serving"),
    ]
    assert [e["spelling"] for e in compiles] == [
        {"positional": ["torch_dtype", "num_heads", "is_workspace_size_zero", "use_pdl"], "keywords": []},
        {
            "positional": [],
            "keywords": ["torch_dtype", "num_heads", "is_workspace_size_zero", "use_pdl", "partial_fp16"],
        },
    ]
    assert len(synthetic_cute.compiled) == 2
    analysis = analyse(capture.sink.events, decode.rules(), FP8_CONTEXT)
    assert [f.code for f in analysis.findings] == ["MLA001", "MLA006"]  # the respelled warm-up is not also MLA002
    serving, spelling = analysis.findings
    assert serving.nearest == decode.key(FP8, True) and serving.diff == {}
    assert "another spelling of the functools key" in serving.message and serving.hint == spelling.hint
    assert "compiled 2 times, under 2 spellings" in spelling.message


def test_the_same_spelling_as_the_dispatch_is_one_entry(decode):
    with observe(decode) as capture:
        synthetic_decode.warmup_decode(FP8)
        decode.dispatch(1, FP8, True)
    assert len(of_type(capture.sink.events, "compile")) == 1 and len(synthetic_cute.compiled) == 1
    assert analyse(capture.sink.events, decode.rules(), FP8_CONTEXT).findings == []


def test_functools_entries_cached_before_install_are_listed_as_preexisting(decode):
    decode.precompile(FP8, True)
    with observe(decode) as capture:
        decode.dispatch(1, FP8, True)
    assert of_type(capture.sink.events, "family")[0]["preexisting"] == 1
    [compiled] = of_type(capture.sink.events, "compile")
    assert (compiled["phase"], compiled["key"]) == ("preexisting", decode.key(FP8, True))
    assert compiled["spelling"]["keywords"] == list(decode.fields)
    analysis = analyse(capture.sink.events, decode.rules(), FP8_CONTEXT)
    assert analysis.findings == [] and of_type(capture.sink.events, "internal_error") == []
    assert len(synthetic_cute.compiled) == 1


def test_a_functools_cache_whose_entries_cannot_be_read_is_not_installed(decode, monkeypatch):
    """Where the interpreter does not let capture read the C cache's entries, no compile could be attributed to its
    call: the family is refused (a stale-rule error), never watched by guesswork."""
    monkeypatch.setattr("mlacheck.capture.caches.functools_cache.gc.get_referents", lambda *objects: [])
    with pytest.raises(MlacheckError, match="compiles cannot be attributed to their calls"):
        family_capture(decode, MemorySink()).install()
    assert synthetic_decode._get_compiled_mla_kernel.__class__.__name__ == "_lru_cache_wrapper"


def test_calls_through_a_reference_to_the_original_cached_function_are_reported(decode):
    original = synthetic_decode._get_compiled_mla_kernel
    with observe(decode) as capture:
        assert synthetic_decode._get_compiled_mla_kernel is not original
        original(FP8, 8, True, True)
    [unseen] = of_type(capture.sink.events, "unseen")
    assert "1 variant(s) entered synthetic_decode._get_compiled_mla_kernel past mlacheck" in unseen["what"]
    assert synthetic_decode._get_compiled_mla_kernel is original


def test_a_cleared_cache_compiles_a_precompiled_variant_again_on_the_serving_path(kind):
    with observe(kind) as capture:
        kind.precompile(FP8, True)
        kind.dispatch(1, FP8, True)
        kind.dispatch(1, FP8, True)  # fast path from now on
        if kind is DECODE:
            synthetic_decode._get_compiled_mla_kernel.cache_clear()
        else:
            module_cache(kind).clear()
        assert kind.cached_count() == 0
        assert kind.dispatch(1, FP8, True) == 2
    assert [e["phase"] for e in of_type(capture.sink.events, "compile")] == ["warmup", "serving"]
    [serving] = analyse(capture.sink.events, kind.rules(), FP8_CONTEXT).findings
    assert (serving.code, serving.key, serving.nearest, serving.diff) == (
        "MLA001",
        kind.key(FP8, True),
        kind.key(FP8, True),
        {},
    )
    assert "its cache entry was dropped (cleared, popped or evicted) before this dispatch" in serving.message


def test_compile_skip_after_cache_clear_still_compiles_nothing(decode):
    decode.precompile(FP8, True)
    synthetic_cute.compiled.clear()
    with observe(decode, CapturePolicy(compile="skip")):
        synthetic_decode._get_compiled_mla_kernel.cache_clear()
        decode.precompile(FP8, True)
    assert synthetic_cute.compiled == []
    assert isinstance(synthetic_decode._kernel(FP8, 16, 1, True), synthetic_cute.Kernel)  # removed: compiles again


def test_the_front_cache_gives_a_lookup_outside_a_dispatch_the_original_cached_object(decode):
    with observe(decode):
        first = synthetic_decode._kernel(FP8, 16, 1, True)  # a compile, outside any dispatch
        again = synthetic_decode._kernel(FP8, 16, 1, True)  # a hit, outside any dispatch
        assert decode.dispatch(1, FP8, True) == 2
        launcher = synthetic_decode._kernel(FP8, 16, 1, True)  # seen in serving: what the dispatch gets, a launcher
        assert launcher is not first and launcher(q(3)) == 6
    assert again is first and first.launches == 2  # the dispatch launched the very kernel the cache holds
    assert synthetic_decode._kernel(FP8, 16, 1, True) is first  # removed: the original answers from its own cache


def test_counts_stay_exact_across_lookups_outside_and_inside_dispatches(decode):
    with observe(decode) as capture:
        for _ in range(3):
            for _ in range(5):
                decode.precompile(FP8, True)  # the dispatch's spelling, outside any dispatch: never counted
            for _ in range(7):
                decode.dispatch(1, FP8, True)
    [counts] = of_type(capture.sink.events, "counts")
    vid = of_type(capture.sink.events, "compile")[0]["vid"]
    assert counts["dispatches"] == {f"{vid}:serving": 21} and counts["calls"] == {"tokenspeed_mla_decode": 21}
    assert of_type(capture.sink.events, "no_lookup") == []


def test_a_cached_value_that_is_not_called_is_counted_per_lookup(decode, monkeypatch):
    @functools.cache
    def boxed(torch_dtype, num_heads, is_workspace_size_zero, use_pdl, *, partial_fp16=False):
        return (synthetic_cute.compile(torch_dtype, num_heads, is_workspace_size_zero, use_pdl, partial_fp16),)

    monkeypatch.setattr(synthetic_decode, "_get_compiled_mla_kernel", boxed)
    monkeypatch.setattr(
        synthetic_decode,
        "_kernel",
        lambda dtype, heads, batch, use_pdl: synthetic_decode._get_compiled_mla_kernel(
            torch_dtype=dtype, num_heads=heads, is_workspace_size_zero=batch < 8, use_pdl=use_pdl, partial_fp16=False
        )[0],
    )
    with observe(decode) as capture:
        assert [decode.dispatch(x, FP8, True) for x in range(4)] == [0, 2, 4, 6]
    [counts] = of_type(capture.sink.events, "counts")
    assert list(counts["dispatches"].values()) == [4] and of_type(capture.sink.events, "no_lookup") == []


def test_a_front_the_program_still_holds_is_emptied_with_the_current_one(decode):
    original = synthetic_decode._get_compiled_mla_kernel
    with observe(decode) as capture:
        held = synthetic_decode._get_compiled_mla_kernel  # a reference taken after install
        decode.dispatch(1, FP8, True)  # `held` answers this variant with a counting launcher from now on
        decode.precompile(BF16, True)  # outside any dispatch: a new front takes the module attribute
        assert synthetic_decode._get_compiled_mla_kernel is not held
        mark_serving_start(capture)  # what was counted so far was warm-up
        synthetic_decode._get_compiled_mla_kernel = held  # the program's dispatch reaches the front it held
        for _ in range(3):
            decode.dispatch(1, FP8, True)
    assert synthetic_decode._get_compiled_mla_kernel is original
    vid = of_type(capture.sink.events, "compile")[0]["vid"]
    assert of_type(capture.sink.events, "counts")[-1]["dispatches"] == {f"{vid}:warmup": 1, f"{vid}:serving": 3}


def test_a_front_that_cannot_be_renewed_is_an_internal_error_not_the_programs(decode, monkeypatch):
    with observe(decode) as capture:
        monkeypatch.setattr(type(capture._adapter), "_front", lambda self: 1 / 0)
        decode.precompile(FP8, True)  # outside any dispatch: the front should be renewed, and cannot be
        assert decode.dispatch(1, FP8, True) == 2  # the held raw kernel: launched, not counted
    [error] = of_type(capture.sink.events, "internal_error")
    assert "ZeroDivisionError" in error["message"]
    analysis = analyse(capture.sink.events, decode.rules(), FP8_CONTEXT)
    assert any("capture failed 1 time(s)" in reason for reason in analysis.incomplete)


def test_a_lookup_whose_stack_cannot_be_read_is_one_internal_error_and_gets_the_programs_value(decode, monkeypatch):
    with observe(decode) as capture:
        decode.precompile(FP8, True)
        monkeypatch.setattr(type(capture._reader), "read", lambda self, frame: 1 / 0)
        assert decode.dispatch(1, FP8, True) == 2  # the program's kernel, launched
    errors = [error["where"].rpartition(": ")[2] for error in of_type(capture.sink.events, "internal_error")]
    assert errors == ["lookup", "dispatch"]  # the lookup, and the wrapper's report of a call with none counted
    analysis = analyse(capture.sink.events, decode.rules(), FP8_CONTEXT)
    assert any("capture failed 2 time(s)" in reason for reason in analysis.incomplete)


def test_a_typed_functools_cache_keeps_its_types_apart_under_capture(decode, monkeypatch):
    typed = functools.lru_cache(maxsize=None, typed=True)(synthetic_decode._get_compiled_mla_kernel.__wrapped__)
    monkeypatch.setattr(synthetic_decode, "_get_compiled_mla_kernel", typed)
    with observe(decode) as capture:
        for use_pdl in (True, 1, True, 1):  # equal and of one hash, but two entries of a typed cache
            synthetic_decode.tokenspeed_mla_decode(q(1), use_pdl=use_pdl)
    assert len(synthetic_cute.compiled) == 2 == typed.cache_info().currsize
    assert len(of_type(capture.sink.events, "compile")) == 2


def test_a_bounded_lru_cache_is_refused_in_one_line(decode, monkeypatch):
    monkeypatch.setattr(
        synthetic_decode,
        "_get_compiled_mla_kernel",
        functools.lru_cache(maxsize=8)(synthetic_decode._get_compiled_mla_kernel.__wrapped__),
    )
    with pytest.raises(MlacheckError, match="bounded to 8 entries; mlacheck watches unbounded functools caches only"):
        family_capture(decode, MemorySink()).install()


def test_get_after_contains_is_not_a_second_lookup(monkeypatch):
    # A JITCache that reads its entry with .get after the dispatch's `in`: still one dispatch per call.
    monkeypatch.setattr(synthetic_fa4.JITCache, "__getitem__", lambda self, key: self.cache.get(key))
    with observe(FA4) as capture:
        FA4.precompile(FP8, True)
        for _ in range(3):
            FA4.dispatch(1, FP8, True)
        assert module_cache(FA4).get("missing", 7) == 7
    [counts] = of_type(capture.sink.events, "counts")
    vid = of_type(capture.sink.events, "compile")[0]["vid"]
    assert counts["dispatches"] == {f"{vid}:serving": 3}


def test_a_cache_once_key_is_named_by_the_signature_and_keeps_its_spelling():
    """SGLang's cache_once keys the call as spelled: a warm-up that passes causal by keyword compiles an entry the
    dispatch (all positional) never hits: the variant compiles twice (MLA006), and the key is named by parameter."""
    from tests.fixtures.synthetic_harness import CLOSURE, synthetic_closure

    with observe(CLOSURE) as capture:
        synthetic_closure.jit_module(FP8, 192, causal=True)
        CLOSURE.dispatch(1, FP8, True)
    compiles = of_type(capture.sink.events, "compile")
    assert [(e["key"], e["spelling"], e["phase"]) for e in compiles] == [
        (CLOSURE.key(FP8, True), {"positional": ["q_dtype", "head_dim"], "keywords": ["causal"]}, "warmup"),
        (CLOSURE.key(FP8, True), {"positional": ["q_dtype", "head_dim", "causal"], "keywords": []}, "serving"),
    ]
    findings = analyse(capture.sink.events, CLOSURE.rules(), FP8_CONTEXT).findings
    assert sorted(f.code for f in findings) == ["MLA001", "MLA006"]


def test_a_class_dict_is_replaced_where_it_is_defined_and_given_back():
    """The rule names the subclass; the base class defines the dict: it is recorded there, so every runner shares it."""
    from tests.fixtures.synthetic_harness import CLASSDICT, synthetic_classdict

    original = synthetic_classdict.Runner.kernel_cache
    with observe(CLASSDICT) as capture:
        assert isinstance(synthetic_classdict.Runner.kernel_cache, RecordingDict)
        assert "kernel_cache" not in vars(synthetic_classdict.PagedRunner)
        synthetic_classdict.Runner()._compile(FP8, 192, True)
        CLASSDICT.dispatch(1, FP8, True)  # a PagedRunner: hits what the base runner compiled
    assert synthetic_classdict.Runner.kernel_cache is original and len(original) == 1
    assert [e["phase"] for e in of_type(capture.sink.events, "compile")] == ["warmup"]
    assert analyse(capture.sink.events, CLASSDICT.rules(), FP8_CONTEXT).findings == []


def test_a_shared_compile_function_is_the_familys_only_from_its_compile_callers():
    """FA4's rules name cute.compile, which every CuTe DSL kernel in the process calls: a compile from elsewhere runs
    untouched (compiled under --compile skip too, no compile event), so a compile net can name it."""
    with observe(FA4, CapturePolicy(compile="skip")) as capture:
        FA4.precompile(FP8, True)  # synthetic_fa4.precompile: a compile caller
        other = synthetic_cute.compile("another kernel's key")  # not one of the family's callers
    assert not isinstance(other, SkippedCompile) and synthetic_cute.compiled == [("another kernel's key",)]
    assert [e["key"] for e in of_type(capture.sink.events, "compile")] == [FA4.key(FP8, True)]


def test_a_compile_callers_compile_through_a_later_wrapper_is_still_the_familys():
    """vLLM's JIT monitor replaces cute.compile after the warm-up with a wrapper of what it found there: a compile
    caller's compile, seen through the wrapper's frame, is still the family's (skipped here, a compile event)."""
    with observe(FA4, CapturePolicy(compile="skip")) as capture:
        timed = synthetic_cute.compile
        synthetic_cute.compile = lambda *key: timed(*key)  # a wrapper of another module
        try:
            FA4.precompile(FP8, True)
        finally:
            synthetic_cute.compile = timed
    assert synthetic_cute.compiled == []
    assert [e["key"] for e in of_type(capture.sink.events, "compile")] == [FA4.key(FP8, True)]


def test_a_rule_naming_another_modules_compile_without_its_callers_is_refused(tmp_path):
    text = (FIXTURES / "synthetic_fa4.toml").read_text()
    path = tmp_path / "fa4.toml"
    path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("compile_callers")))
    with pytest.raises(MlacheckError, match="compile_callers"):
        load_rules(path)
