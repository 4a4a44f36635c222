"""Cache kind "jit_dir" (capture/caches/jit_dir.py) against a synthetic native library (tests/fixtures/
synthetic_jit_dir.py): a compile is an entry that appears in the disk cache during a dispatch call; a known serving
variant is counted without looking at the disk; the false passes (a moved root, an unreadable folder) are errors."""

import os

import pytest
import synthetic_jit_dir  # tests/fixtures is on sys.path (conftest imports synthetic_harness)
from synthetic_jit_dir import Array

from mlacheck.capture import FamilyCapture
from mlacheck.rulefiles import RuleSet, load_rule_file
from mlacheck.sinks import MemorySink
from tests.fixtures.synthetic_harness import FIXTURES, mark_serving_start, of_type


def warm_up(ms):
    for m in ms:
        synthetic_jit_dir.matmul(Array(m, 64), Array(8, 64), None)


def fresh_native(tmp_path, monkeypatch):
    """A native library of its own for the test, bound into the module as at import."""
    monkeypatch.setenv("SYNTHETIC_JIT_DIR", str(tmp_path / "jit"))
    monkeypatch.setattr(synthetic_jit_dir, "_native", synthetic_jit_dir.Native())
    monkeypatch.setattr(synthetic_jit_dir, "set_num_sms", synthetic_jit_dir._native.set_num_sms)
    monkeypatch.setattr(synthetic_jit_dir, "layout_bound", synthetic_jit_dir._native.layout)


@pytest.fixture
def capture(tmp_path, monkeypatch):
    fresh_native(tmp_path, monkeypatch)
    rules = RuleSet([load_rule_file(FIXTURES / "synthetic_jit_dir.toml")])
    capture = FamilyCapture(rules.families[0], MemorySink(), phases=rules.phases)
    capture.install()
    yield capture
    capture.remove()


def compiles(capture):
    return [(e["key"]["a"], e["phase"], e["origin"]) for e in of_type(capture.sink.events, "compile")]


def test_an_entry_made_during_a_serving_call_is_a_serving_path_compile_and_a_warmed_kernel_is_not(capture):
    warm_up([32, 64])
    mark_serving_start(capture)
    synthetic_jit_dir.matmul(Array(48, 64), Array(8, 64), None)  # the warm-up's kernel: no entry
    synthetic_jit_dir.matmul(Array(300, 64), Array(8, 64), None)  # another kernel: an entry appears
    assert compiles(capture) == [
        ("fp8[32, 64]", "warmup", "compile"),
        ("fp8[64, 64]", "borrowed", "unknown"),  # built nothing: 32's kernel
        ("fp8[48, 64]", "borrowed", "unknown"),
        ("fp8[300, 64]", "serving", "compile"),
    ]
    [serving] = [e for e in of_type(capture.sink.events, "compile") if e["phase"] == "serving"]
    assert serving["key"]["kernel"] == "gemm" and serving["seconds"] is not None
    assert not capture.sink.events or not of_type(capture.sink.events, "internal_error")


def test_a_variant_dispatched_on_the_serving_path_is_counted_without_looking_at_the_disk(capture, monkeypatch):
    mark_serving_start(capture)
    synthetic_jit_dir.matmul(Array(300, 64), Array(8, 64), None)
    looked = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: looked.append(path) or real_stat(path, *a, **k))
    for _ in range(5):
        synthetic_jit_dir.matmul(Array(300, 64), Array(8, 64), None)
    assert looked == []
    capture.flush(final=True)
    [counts] = of_type(capture.sink.events, "counts")[-1:]
    assert "6" in str(counts)


def test_a_setting_changed_after_the_warmup_is_part_of_the_key(capture):
    warm_up([300])
    mark_serving_start(capture)
    synthetic_jit_dir.set_num_sms(66)
    synthetic_jit_dir.matmul(Array(300, 64), Array(8, 64), None)
    serving = [e for e in of_type(capture.sink.events, "compile") if e["phase"] == "serving"]
    assert [e["key"]["num_sms"] for e in serving] == [66]


def test_a_setting_given_as_a_tuple_keys_the_calls_after_it(capture):
    """DeepGEMM's set_block_size_multiple_of takes an int or a pair: the key must stay hashable with either."""
    mark_serving_start(capture)
    synthetic_jit_dir.set_num_sms((66, 2))
    for _ in range(2):
        synthetic_jit_dir.matmul(Array(300, 64), Array(8, 64), None)
    assert not of_type(capture.sink.events, "internal_error")
    serving = [e for e in of_type(capture.sink.events, "compile") if e["phase"] == "serving"]
    assert [e["key"]["num_sms"] for e in serving] == [[66, 2]]
    dispatched = [e["key"]["num_sms"] for e in of_type(capture.sink.events, "dispatch") if e["phase"] == "serving"]
    assert dispatched == [[66, 2]]


def test_a_cache_root_moved_after_first_use_is_an_internal_error(capture, tmp_path, monkeypatch):
    warm_up([32])
    monkeypatch.setenv("SYNTHETIC_JIT_DIR", str(tmp_path / "elsewhere"))
    mark_serving_start(capture)
    synthetic_jit_dir.matmul(Array(300, 64), Array(8, 64), None)
    [error] = of_type(capture.sink.events, "internal_error")
    assert "cache root changed" in error["message"]


def test_an_unreadable_cache_folder_is_an_internal_error(capture, tmp_path):
    (tmp_path / "jit").mkdir()
    (tmp_path / "jit" / "cache").write_text("")
    mark_serving_start(capture)
    with pytest.raises(OSError):  # the synthetic library itself cannot commit there either
        synthetic_jit_dir.matmul(Array(300, 64), Array(8, 64), None)
    assert any("cannot read" in e["message"] for e in of_type(capture.sink.events, "internal_error"))


def test_a_call_of_the_native_library_outside_any_dispatch_is_not_a_dispatch_and_remove_gives_it_back(capture):
    native = capture._adapter.module._native._library
    bound = synthetic_jit_dir.layout_bound
    synthetic_jit_dir._native.gemm(Array(300, 64), Array(8, 64), None)
    assert not of_type(capture.sink.events, "compile") and not of_type(capture.sink.events, "dispatch")
    assert synthetic_jit_dir._native.loaded is native.loaded  # what is not an operation is the library's own
    capture.remove()
    assert synthetic_jit_dir._native is native
    assert synthetic_jit_dir.layout_bound is not bound and synthetic_jit_dir.layout_bound == native.layout


def unwatched(capture):
    return [(e["kernel"], e["key"], e["phase"]) for e in of_type(capture.sink.events, "unwatched_compile")]


@pytest.mark.parametrize("route", ["a name no dispatch uses", "bound at import", "an observed one, no dispatch"])
def test_a_kernel_built_by_a_call_no_dispatch_observes_is_an_unwatched_compile_not_nothing(capture, route):
    """DeepGEMM's layout and Mega MoE kernels compile through operations no rule keys: reached by a helper through
    the stand-in, bound to the library before capture installed, or an observed operation called from elsewhere."""
    call = {
        "a name no dispatch uses": lambda m: synthetic_jit_dir.transform(Array(m, 8)),
        "bound at import": lambda m: synthetic_jit_dir.layout_bound(Array(m, 8)),
        "an observed one, no dispatch": lambda m: synthetic_jit_dir._native.gemm(Array(m, 64), Array(8, 64), None),
    }[route]
    kernel, field = ("gemm", "a") if route.startswith("an observed") else ("layout", "sf")
    mark_serving_start(capture)
    call(300)
    call(300)  # the library holds the kernel now: nothing new on the disk
    call(512 if kernel == "layout" else 32)  # another shape: another kernel
    label = f"synthetic_jit_dir._native.{kernel}"
    found = unwatched(capture)
    assert [(k, key[field], phase) for k, key, phase in found] == [
        (label, "fp8[300, 8]" if kernel == "layout" else "fp8[300, 64]", "serving"),
        (label, "fp8[512, 8]" if kernel == "layout" else "fp8[32, 64]", "serving"),
    ]
    assert {e["net"] for e in of_type(capture.sink.events, "unwatched_compile")} == {"synthetic.jit_dir"}
    assert not of_type(capture.sink.events, "internal_error")


class Unreadable(Array):
    """An argument the library reads (its shape and dtype) whose strides cannot be read (a key holds its layout)."""

    def stride(self):
        raise RuntimeError("no strides here")


def test_a_netted_build_for_an_argument_that_cannot_be_read_is_still_named_and_never_raises(capture):
    """What a netted compile was built for is read after the call ran: a failure there raised into the program, with
    the library's result lost. Now the call returns, the build is still an unwatched compile, and the run has an
    internal error (it cannot pass)."""
    mark_serving_start(capture)
    assert synthetic_jit_dir.transform(Unreadable(300, 8)) is None  # (the library's own result)
    [(kernel, key, phase)] = unwatched(capture)
    assert (kernel, key, phase) == ("synthetic_jit_dir._native.layout", {}, "serving")
    [error] = of_type(capture.sink.events, "internal_error")
    assert "no strides here" in error["message"]


def test_a_netted_kernel_built_in_the_warmup_is_warmup_and_its_later_calls_are_not_looked_at(capture, monkeypatch):
    def warm_layouts():  # not a warm-up frame of the rules: the phase comes from the mark that follows
        synthetic_jit_dir.transform(Array(300, 8))

    warm_layouts()
    mark_serving_start(capture)
    looked = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: looked.append(path) or real_stat(path, *a, **k))
    for _ in range(3):
        synthetic_jit_dir.transform(Array(300, 8))
    assert looked == []
    [(kernel, key, phase)] = unwatched(capture)
    assert phase == "unknown" and key == {"sf": "fp8[300, 8]"}  # settled as warm-up by the mark after it
    starts = [e for e in of_type(capture.sink.events, "compile_start") if e.get("net")]
    ends = {e["id"]: e["outcome"] for e in of_type(capture.sink.events, "compile_end")}
    assert [ends[e["id"]] for e in starts] == ["returned"]


def test_a_netted_call_the_hot_path_cannot_key_is_keyed_by_the_slow_path(capture):
    mark_serving_start(capture)
    for m in (300, 300, 600):
        synthetic_jit_dir._native.layout(sf=Array(m, 8))  # a keyword
    assert [key["sf"] for _, key, _ in unwatched(capture)] == ["fp8[300, 8]", "fp8[600, 8]"]


def serving_dispatches(capture):
    """Each serving variant's key fields a, num_sms and block, and its dispatch count."""
    capture.flush(final=True)
    counts = of_type(capture.sink.events, "counts")[-1]["dispatches"]
    keys = {e["vid"]: e["key"] for e in of_type(capture.sink.events, "dispatch") if e["phase"] == "serving"}
    return {(key["a"], key["num_sms"], key["block"]): counts[f"{vid}:serving"] for vid, key in keys.items()}


@pytest.mark.parametrize("change", ["resized in place", "another dtype", "a setting"])
def test_a_serving_call_whose_key_changed_is_never_counted_as_the_variant_served_before(capture, change):
    """The hot path's false pass: the same argument object, changed after its variant was served, must be a variant
    of its own (its first dispatch read from the stack, its compile looked for)."""
    mark_serving_start(capture)
    a, b = Array(300, 64), Array(8, 64)
    for _ in range(3):
        synthetic_jit_dir.matmul(a, b, None)  # served: from the second call on, a hit
    if change == "resized in place":
        a.shape = (48, 64)
    elif change == "another dtype":
        a.dtype = "bf16"
    else:
        synthetic_jit_dir.set_num_sms(66)
    synthetic_jit_dir.matmul(a, b, None)
    changed = {"resized in place": ("fp8[48, 64]", None), "another dtype": ("bf16[300, 64]", None)}
    assert serving_dispatches(capture) == {
        ("fp8[300, 64]", None, None): 3,
        (*changed.get(change, ("fp8[300, 64]", 66)), None): 1,
    }
    assert not of_type(capture.sink.events, "internal_error")


def test_calls_the_hot_path_cannot_key_are_keyed_and_counted_by_the_slow_path(capture):
    """A keyword, a list (DeepGEMM's `ks`) or a type not seen yet: keyed in Python, served from the fast table once
    seen in serving, a changed list a variant of its own."""
    mark_serving_start(capture)
    a, b = Array(300, 64), Array(8, 64)
    for _ in range(3):
        synthetic_jit_dir.matmul_spelled(a, b, [1, 2], 64)
    synthetic_jit_dir.matmul_spelled(a, b, [1, 3], 64)
    capture.flush(final=True)
    keys = {e["vid"]: (*e["key"]["out"], e["key"]["block"]) for e in of_type(capture.sink.events, "dispatch")}
    counts = of_type(capture.sink.events, "counts")[-1]["dispatches"]
    assert {keys[int(vid.split(":")[0])]: count for vid, count in counts.items()} == {(1, 2, 64): 3, (1, 3, 64): 1}
    assert not of_type(capture.sink.events, "internal_error")


def test_a_call_that_cannot_be_keyed_is_an_internal_error_and_still_runs(capture):
    mark_serving_start(capture)
    native = synthetic_jit_dir._native._library
    synthetic_jit_dir.matmul_spelled(Array(300, 64), Array(8, 64), [[1], {"unhashable": 2}], 64)
    assert native.loaded  # the library ran the call
    [error] = of_type(capture.sink.events, "internal_error")
    assert "cannot key a call of gemm" in error["message"]


def test_an_operation_argument_the_key_does_not_hold_is_an_internal_error_at_its_first_call(tmp_path, monkeypatch):
    """The native library may pick its kernel by any argument: one that no key field names could make a call that
    compiles look like a hit of a variant served before."""
    fresh_native(tmp_path, monkeypatch)
    text = (FIXTURES / "synthetic_jit_dir.toml").read_text()
    rule = tmp_path / "synthetic_jit_dir.toml"
    rule.write_text(text.replace('"out", "block"]', '"out"]'))
    rules = RuleSet([load_rule_file(rule)])
    capture = FamilyCapture(rules.families[0], MemorySink(), phases=rules.phases)
    capture.install()
    try:
        assert not of_type(capture.sink.events, "internal_error")  # installing reports nothing: no call yet
        mark_serving_start(capture)
        for block in (64, 128, 128):
            synthetic_jit_dir.matmul_spelled(Array(300, 64), Array(8, 64), None, block)
    finally:
        capture.remove()
    [error] = of_type(capture.sink.events, "internal_error")
    assert (
        "synthetic_jit_dir._native.gemm takes block, which synthetic.jit_dir's key_fields do not hold"
        in error["message"]
    )


def test_a_serving_call_that_built_nothing_where_only_this_process_filled_the_cache_borrowed_its_kernel(capture):
    """M=48 runs the kernel M=32's warm-up built (one per M bucket, chosen in native code): not a compile, and not a
    variant that never entered the cache either."""
    warm_up([32])
    mark_serving_start(capture)
    synthetic_jit_dir.matmul(Array(48, 64), Array(8, 64), None)
    assert compiles(capture) == [("fp8[32, 64]", "warmup", "compile"), ("fp8[48, 64]", "borrowed", "unknown")]


def test_a_call_that_built_nothing_where_the_cache_held_another_processes_entry_is_not_called_borrowed(capture):
    """An earlier run (or another rank) built M=300's kernel: loaded from the disk here, it would compile on the
    serving path with an empty cache; M=48's kernel may be the warm-up's or the disk's: neither is known."""
    synthetic_jit_dir.Native().gemm(Array(300, 64), Array(8, 64), None)  # another process, the same cache
    warm_up([32])
    mark_serving_start(capture)
    synthetic_jit_dir.matmul(Array(300, 64), Array(8, 64), None)
    synthetic_jit_dir.matmul(Array(48, 64), Array(8, 64), None)
    assert compiles(capture) == [
        ("fp8[32, 64]", "warmup", "compile"),
        ("fp8[300, 64]", "unknown", "unknown"),
        ("fp8[48, 64]", "unknown", "unknown"),
    ]


def test_an_entry_another_process_adds_between_the_calls_makes_the_cache_foreign(capture):
    warm_up([32])
    mark_serving_start(capture)
    synthetic_jit_dir.Native().gemm(Array(300, 64), Array(8, 64), None)  # another rank, after this one's warm-up
    synthetic_jit_dir.matmul(Array(48, 64), Array(8, 64), None)
    assert compiles(capture)[-1] == ("fp8[48, 64]", "unknown", "unknown")


def test_a_process_none_of_whose_calls_built_an_entry_where_capture_looks_borrows_nothing(
    capture, monkeypatch, tmp_path
):
    """The library's builds land where capture does not look (a cache root it cannot know): no call built anything
    seen, so a serving call that built nothing may have compiled there: never `borrowed`, never a pass."""
    build = synthetic_jit_dir.Native._build

    def elsewhere(native, kernel, config):
        watched = os.environ["SYNTHETIC_JIT_DIR"]
        os.environ["SYNTHETIC_JIT_DIR"] = str(tmp_path / "elsewhere")
        try:
            build(native, kernel, config)
        finally:
            os.environ["SYNTHETIC_JIT_DIR"] = watched

    monkeypatch.setattr(synthetic_jit_dir.Native, "_build", elsewhere)
    warm_up([32])
    mark_serving_start(capture)
    synthetic_jit_dir.matmul(Array(300, 64), Array(8, 64), None)  # a compile, unseen
    assert compiles(capture) == [("fp8[32, 64]", "warmup", "unknown"), ("fp8[300, 64]", "unknown", "unknown")]


def test_a_warmup_shape_that_built_nothing_ran_another_keys_kernel_and_wasted_no_compile(capture):
    warm_up([32, 48])  # 48 runs 32's kernel
    mark_serving_start(capture)
    synthetic_jit_dir.matmul(Array(32, 64), Array(8, 64), None)
    assert compiles(capture) == [("fp8[32, 64]", "warmup", "compile"), ("fp8[48, 64]", "borrowed", "unknown")]


def test_records_name_the_entries_a_compile_made_and_the_foreign_ones_found_since_the_last_record(capture):
    """What the analysis needs to tell another rank's build (a compile of the run) from an earlier run's entry: a
    record that built nothing names the foreign entries found since the last such record."""
    synthetic_jit_dir.Native().gemm(Array(300, 64), Array(8, 64), None)  # another process, the same cache
    cache = os.path.join(os.environ["SYNTHETIC_JIT_DIR"], "cache")
    [other] = [os.path.join(cache, name) for name in os.listdir(cache)]
    warm_up([32])
    mark_serving_start(capture)
    synthetic_jit_dir.matmul(Array(300, 64), Array(8, 64), None)
    synthetic_jit_dir.matmul(Array(48, 64), Array(8, 64), None)
    records = of_type(capture.sink.events, "compile")
    [own] = {os.path.join(cache, name) for name in os.listdir(cache)} - {other}
    assert [(r["key"]["a"], r.get("entries"), r.get("foreign")) for r in records] == [
        ("fp8[32, 64]", [own], None),
        ("fp8[300, 64]", None, [other]),
        ("fp8[48, 64]", None, None),
    ]


def test_a_netted_build_names_the_entries_it_made(capture):
    synthetic_jit_dir.transform(Array(64, 8, dtype="fp32"))
    [netted] = of_type(capture.sink.events, "unwatched_compile")
    cache = os.path.join(os.environ["SYNTHETIC_JIT_DIR"], "cache")
    assert netted["entries"] == [os.path.join(cache, name) for name in os.listdir(cache)]
