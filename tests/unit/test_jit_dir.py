"""Cache kind "jit_dir" (capture/caches/jit_dir.py) against a synthetic native library (tests/fixtures/
synthetic_jit_dir.py): a compile is an entry that appears in the disk cache during a dispatch call; a known serving
variant is counted without looking at the disk; the false passes (a moved root, an unreadable folder) are errors."""

import os

import pytest
import synthetic_jit_dir  # tests/fixtures is on sys.path (conftest imports synthetic_harness)
from synthetic_jit_dir import Array

from mlacheck.capture import FamilyCapture
from mlacheck.events import MemorySink
from mlacheck.rulefiles import RuleSet, load_rule_file
from tests.fixtures.synthetic_harness import FIXTURES, mark_serving_start, of_type


def warm_up(ms):
    for m in ms:
        synthetic_jit_dir.matmul(Array(m, 64), Array(8, 64), None)


@pytest.fixture
def capture(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTHETIC_JIT_DIR", str(tmp_path / "jit"))
    monkeypatch.setattr(synthetic_jit_dir, "_native", synthetic_jit_dir.Native())
    monkeypatch.setattr(synthetic_jit_dir, "set_num_sms", synthetic_jit_dir._native.set_num_sms)
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
        ("fp8[64, 64]", "warmup", "unknown"),
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
    synthetic_jit_dir._native.gemm(Array(300, 64), Array(8, 64), None)
    assert not of_type(capture.sink.events, "compile") and not of_type(capture.sink.events, "dispatch")
    capture.remove()
    assert synthetic_jit_dir._native is native
