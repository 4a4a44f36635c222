"""DeepGEMM observed and timed in program mode (issue 28 item 3), through sgl-deep-gemm 0.2.5's published Python
layer (marker `network`: it comes from PyPI) with its native extension stood in on the CPU
(tests/fixtures/deep_gemm_extension.py plays deep_jit's runtime: a config per M bucket, its disk cache's committed
entries). A warm-up over some Ms, then traffic that needs another: the serving-path compile is MLA001 naming the
shape and its stall, the warm-up shapes never served are MLA002. The false passes come first: a cache root moved
after DeepGEMM's first use, a cache folder that cannot be read, an entry committed without its marker."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from mlacheck.rulefiles import BUNDLED
from tests.integration.cli import ROOT, run_cli
from tests.integration.published import cached_wheel, extracted_from, first_on_path, installed

pytestmark = pytest.mark.network

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "deep_gemm_engine.py")
FAMILY = "deep_gemm.gemm"


@pytest.fixture(scope="module")
def deep_gemm(tmp_path_factory):
    return installed(tmp_path_factory.mktemp("deep_gemm"), "sgl-deep-gemm==0.2.5")


@pytest.fixture(scope="module")
def vllm_deep_gemm(tmp_path_factory):
    """vLLM 0.34.0's vendored DeepGEMM, its package's own __init__ files stubbed (they import the whole engine)."""
    return extracted_from(
        tmp_path_factory.mktemp("vllm"),
        cached_wheel("vllm==0.34.0"),
        ("vllm/third_party/deep_gemm/",),
        ("vllm/__init__.py", "vllm/third_party/__init__.py"),
    )


def engine_env(tmp_path, deep_gemm, warmup, serve, **env):
    return {
        **first_on_path(deep_gemm),
        "DG_JIT_CACHE_DIR": str(tmp_path / "dg"),
        "DG_ENGINE_WARMUP": ",".join(map(str, warmup)),
        "DG_ENGINE_SERVE": ",".join(map(str, serve)),
        **env,
    }


def run(tmp_path, deep_gemm, warmup, serve, frame=True, command=(sys.executable, PROGRAM), **env):
    """The engine under `mlacheck run --dry` (`command`: the program); `frame`: with its warm-up declared as a
    [[phase]] frame."""
    rules = tmp_path / "rules"
    rules.mkdir()
    for path in [*BUNDLED.glob("*.toml"), *([ROOT / "tests" / "fixtures" / "deep_gemm_engine.toml"] if frame else [])]:
        shutil.copy(path, rules)
    environment = engine_env(tmp_path, deep_gemm, warmup, serve, **env)
    result = run_cli(
        "run",
        "--dry",
        "--rules",
        str(rules),
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        *command,
        tmp_path=tmp_path,
        env_extra=environment,
    )
    assert "deep_gemm engine done" in result.stdout, result.stdout + result.stderr
    return result


UNKEYED = """
import importlib, json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import deep_gemm_extension
deep_gemm_extension.install()
importlib.import_module(sys.argv[3])
from mlacheck.capture import FamilyCapture
from mlacheck.rulefiles import load_rules
from mlacheck.sinks import MemorySink
capture = FamilyCapture(load_rules().family(sys.argv[4]), MemorySink())
capture.install()
print(json.dumps({"observed": sorted(capture._adapter._names), "unkeyed": capture._adapter._unkeyed}))
"""


def verdict_line(result):
    """The terminal's verdict line, its wrapped parts joined."""
    return " ".join(result.stdout[result.stdout.rindex("verdict:") :].split())


def findings(result, code):
    return [f for f in result.report["findings"] if f["code"] == code]


def test_a_cache_root_moved_after_first_use_is_incomplete_not_a_pass(tmp_path, deep_gemm):
    # the library keeps the root it read first; its serving-path compile lands there, where capture no longer looks
    result = run(tmp_path, deep_gemm, [32, 64], [300], DG_ENGINE_MOVE_ROOT=str(tmp_path / "elsewhere"))
    assert result.code == 2, result.stdout
    assert result.report["verdict"] == "incomplete"
    assert any("cache root changed" in line for line in result.report["internal_errors"]), result.stdout


def test_a_cache_folder_that_cannot_be_read_is_incomplete_not_a_pass(tmp_path, deep_gemm):
    (tmp_path / "dg").mkdir()
    (tmp_path / "dg" / "cache").write_text("not a folder")  # listing it fails, as a folder without read access does
    result = run(tmp_path, deep_gemm, [32], [300])
    assert result.code == 2, result.stdout
    assert any("cannot read" in line for line in result.report["internal_errors"]), result.stdout


def test_an_entry_committed_without_its_marker_is_still_a_compile(tmp_path, deep_gemm):
    result = run(tmp_path, deep_gemm, [32, 64], [300], DG_STAND_IN_NO_MARKER="1")
    assert result.code == 1, result.stdout
    [serving] = findings(result, "MLA001")
    assert serving["key"]["a"] == "float8_e4m3fn[300, 7168]"


def test_a_setting_changed_for_serving_compiles_again_and_the_diff_names_it(tmp_path, deep_gemm):
    # the same shapes as the warm-up, but with fewer SMs: DeepGEMM picks (and compiles) another kernel
    result = run(tmp_path, deep_gemm, [64], [64], DG_ENGINE_SERVE_SMS="66")
    assert result.code == 1, result.stdout
    [serving] = findings(result, "MLA001")
    assert serving["diff"] == {"num_sms": [None, 66]}


def test_an_activation_served_mn_major_after_a_k_major_warmup_is_a_serving_path_compile_not_a_pass(tmp_path, deep_gemm):
    # the same dtype and shape: DeepGEMM picks its kernel by the operands' majors too (csrc/utils/layout.hpp
    # get_major_type_ab), so the key holds which dimension has stride 1
    result = run(tmp_path, deep_gemm, [64], [64], DG_ENGINE_SERVE_MN_MAJOR="1")
    assert result.code == 1, result.stdout
    [serving] = findings(result, "MLA001")
    assert serving["key"]["a"] == "float8_e4m3fn[64, 7168] (dimension 0 of stride 1)"
    assert serving["diff"] == {"a": ["float8_e4m3fn[64, 7168]", "float8_e4m3fn[64, 7168] (dimension 0 of stride 1)"]}


def test_an_alpha_served_that_the_warmup_never_passed_is_a_serving_path_compile_not_a_pass(tmp_path, deep_gemm):
    # every argument of the extension's operation is in the key: `alpha` picks another epilogue (another kernel)
    result = run(tmp_path, deep_gemm, [64], [64], DG_ENGINE_SERVE_ALPHA="0.5")
    assert result.code == 1, result.stdout
    [serving] = findings(result, "MLA001")
    assert serving["diff"] == {"alpha": [None, 0.5]}
    assert not result.report["internal_errors"]


def test_a_warmup_that_misses_a_served_m_is_mla001_with_the_shape_and_stall_and_mla002_for_unserved_shapes(
    tmp_path, deep_gemm
):
    result = run(tmp_path, deep_gemm, [32, 64, 128], [64, 100, 300])
    assert result.code == 1, result.stdout
    [serving] = findings(result, "MLA001")
    assert serving["family"] == FAMILY
    assert serving["key"]["kernel"] == "fp8_fp4_gemm_nt"
    assert serving["key"]["a"] == "float8_e4m3fn[300, 7168]" and serving["key"]["d"] == "bfloat16[300, 2112]"
    assert serving["diff"]["a"][1] == "float8_e4m3fn[300, 7168]"
    assert serving["nearest"]["a"] in {f"float8_e4m3fn[{m}, 7168]" for m in (32, 64, 128)}
    assert "s serving-path compile" in serving["summary"] and "0.0 s" not in serving["summary"]
    dead = sorted(f["key"]["a"] for f in findings(result, "MLA002"))
    assert dead == ["float8_e4m3fn[128, 7168]", "float8_e4m3fn[32, 7168]"]  # 64 served; 100 compiled nothing new
    # M=100 was served by the kernel M=128's warm-up built (DeepGEMM picks by M in C++): neither is called wasted,
    # since dropping that warm-up would move its compile onto the serving path
    for finding in findings(result, "MLA002"):
        assert "wasted" not in finding["summary"] and "not known to be wasted" in finding["message"], finding
        assert "may have built" in finding["summary"]
    verdict = verdict_line(result)
    assert "wasted" not in verdict, verdict  # the findings say it is not known to be: the total says no more
    # M=100 built nothing in a cache only this process filled: its kernel is one the warm-up built, not a variant
    # capture did not see enter the cache
    assert result.report["incomplete"] == [], result.report["incomplete"]
    [served] = [
        v for f in result.report["families"] for v in f["variants"] if v["key"]["a"].startswith("float8_e4m3fn[100,")
    ]
    assert (served["status"], served["compile_phase"]) == ("ok", "borrowed")


def test_a_dead_warmup_is_wasted_where_every_dispatched_shape_built_its_own_kernel(tmp_path, deep_gemm):
    result = run(tmp_path, deep_gemm, [32, 300], [32])  # 300's kernel (block_m 256) served nothing
    [dead] = findings(result, "MLA002")
    assert dead["key"]["a"] == "float8_e4m3fn[300, 7168]"
    assert "s of compile wasted" in dead["message"] and "s wasted)" in dead["summary"], dead
    verdict = verdict_line(result)
    assert "s of warm-up wasted" in verdict, verdict


def test_a_warmup_that_covers_every_served_m_passes(tmp_path, deep_gemm):
    result = run(tmp_path, deep_gemm, [64, 100, 300], [64, 100, 300])
    assert result.code == 0, result.stdout
    assert result.report["verdict"] == "pass"


def test_a_warmup_run_inside_serving_is_a_stall_not_a_warmup(tmp_path, deep_gemm):
    # SGLang runs _maybe_compile_deep_gemm_one_type_all inside the first GEMM of each new (kernel type, N, K): where
    # that first GEMM comes after serving start, the whole M-list compile is a serving-path stall
    result = run(tmp_path, deep_gemm, [], [300], DG_ENGINE_LATE_WARMUP="300")
    assert result.report["verdict"] != "pass", "a 300-token compile inside serving passed"
    assert [f["key"]["a"] for f in findings(result, "MLA001")] == ["float8_e4m3fn[300, 7168]"], result.stdout


def filled_earlier(tmp_path, deep_gemm, warmup):
    """DeepGEMM's disk cache as an earlier run (or another rank) left it: the engine run alone, unobserved."""
    done = subprocess.run(
        [sys.executable, PROGRAM], capture_output=True, text=True, timeout=300,
        env={**os.environ, **engine_env(tmp_path, deep_gemm, warmup, [])},
    )  # fmt: skip
    assert done.returncode == 0 and os.listdir(tmp_path / "dg" / "cache"), done.stdout + done.stderr


def test_a_warmup_that_found_its_kernels_on_the_disk_before_serving_start_passes(tmp_path, deep_gemm):
    """A warm disk cache (a persistent DG_JIT_CACHE_DIR): the warm-up, not declared as a frame, builds nothing, yet
    it ran before the mark, so its shapes were ready for serving."""
    filled_earlier(tmp_path, deep_gemm, [64, 300])
    result = run(tmp_path, deep_gemm, [64, 300], [64, 300], frame=False)
    assert (result.code, result.report["verdict"]) == (0, "pass"), result.stdout


def test_a_shape_served_from_a_cache_an_earlier_run_filled_is_not_a_pass_nor_called_a_compile(tmp_path, deep_gemm):
    """M=100 needs the kernel of M=128's bucket, which only an earlier run built: loaded from the disk here, on an empty
    cache it compiles on the serving path. Which of the two this run's warm-up covers is unknown: incomplete, with
    the way to tell (an empty cache), never PASS and never an MLA001 the run did not see."""
    filled_earlier(tmp_path, deep_gemm, [64, 128])
    result = run(tmp_path, deep_gemm, [64], [64, 100])
    assert (result.code, result.report["verdict"]) == (2, "incomplete"), result.stdout
    assert not findings(result, "MLA001")
    [reason] = result.report["incomplete"]
    assert "float8_e4m3fn[100, 7168]" in reason and "no compile of this run made" in reason, reason
    assert "empty cache" in reason


def test_a_shape_served_from_the_cache_another_rank_of_the_run_filled_passes(tmp_path, deep_gemm):
    """Two ranks, one DG_JIT_CACHE_DIR (as vLLM sets it for every rank): the first rank's warm-up builds the kernels of
    M=64 and M=128; the second warms M=64 up and serves M=100, which runs M=128's kernel, built in this run by the
    first: a compile the run saw, in its warm-up. (The same entry left by an earlier, unobserved run: the test above.)"""
    second = f'DG_ENGINE_WARMUP=64 DG_ENGINE_SERVE=100 "{sys.executable}" "{PROGRAM}"'
    command = ("sh", "-c", f'"{sys.executable}" "{PROGRAM}" && {second}')
    result = run(tmp_path, deep_gemm, [64, 128], [], command=command)
    assert (result.code, result.report["verdict"]) == (0, "pass"), result.stdout
    assert len(result.report["processes"]) == 2
    served = [
        v for f in result.report["families"] for v in f["variants"] if v["key"]["a"].startswith("float8_e4m3fn[100,")
    ]
    assert [(v["status"], v["compile_phase"]) for v in served] == [("ok", "borrowed")]


UNOBSERVED = {"layout": "get_mn_major_tma_aligned_tensor", "mega": "fp8_fp4_mega_moe"}


@pytest.mark.parametrize("kernel", sorted(UNOBSERVED))
@pytest.mark.parametrize("which", ["sgl-deep-gemm", "vllm"])
def test_a_deep_gemm_kernel_no_rule_keys_compiled_on_the_serving_path_is_mla007_not_a_pass(
    tmp_path, request, which, kernel
):
    """DeepGEMM JIT-builds its scale-factor layout kernels and the Mega MoE too, through operations no dispatch function
    of the rules calls (sgl-deep-gemm's deep_gemm.mega holds `_C` bound at import; vLLM binds the layout operations
    into its `_C` module): each compile is still seen in the disk cache and named."""
    site = request.getfixturevalue("deep_gemm" if which == "sgl-deep-gemm" else "vllm_deep_gemm")
    env = {"DG_ENGINE_MODULE": "vllm.third_party.deep_gemm"} if which == "vllm" else {}
    result = run(tmp_path, site, [64], [64], DG_ENGINE_UNOBSERVED_SERVE=kernel, **env)
    assert result.code == 1 and result.report["verdict"] == "fail", result.stdout
    [unwatched] = findings(result, "MLA007")
    assert unwatched["family"].startswith("unwatched:") and unwatched["family"].endswith("." + UNOBSERVED[kernel])
    assert "compiled on the serving path" in unwatched["message"], unwatched
    assert not findings(result, "MLA001")  # the GEMM itself was warmed up


@pytest.mark.parametrize("which", ["sgl-deep-gemm", "vllm"])
def test_the_same_kernels_built_in_the_warmup_pass(tmp_path, request, which):
    site = request.getfixturevalue("deep_gemm" if which == "sgl-deep-gemm" else "vllm_deep_gemm")
    env = {"DG_ENGINE_MODULE": "vllm.third_party.deep_gemm"} if which == "vllm" else {}
    kernels = ",".join(UNOBSERVED)
    result = run(
        tmp_path, site, [64], [64], DG_ENGINE_UNOBSERVED_WARMUP=kernels, DG_ENGINE_UNOBSERVED_SERVE=kernels, **env
    )
    assert result.code == 0 and result.report["verdict"] == "pass", result.stdout


@pytest.mark.parametrize("bf16", [False, True], ids=["fp8_gemm_nt", "bf16_gemm_nt"])
def test_vllm_s_vendored_deep_gemm_is_watched_too(tmp_path, vllm_deep_gemm, bf16):
    # its BF16 wrappers reach their operator by name (`_bf16_gemm('bf16_gemm_nt', ...)`): observed all the same
    env = {"DG_ENGINE_MODULE": "vllm.third_party.deep_gemm", **({"DG_ENGINE_BF16": "1"} if bf16 else {})}
    result = run(tmp_path, vllm_deep_gemm, [32, 64], [64, 300], **env)
    assert result.code == 1, result.stdout
    [serving] = findings(result, "MLA001")
    assert serving["family"] == "vllm.deep_gemm"
    assert serving["key"]["kernel"] == ("bf16_gemm_nt" if bf16 else "fp8_fp4_gemm_nt")
    assert serving["key"]["d"] == "bfloat16[300, 2112]"
    assert [f["key"]["d"] for f in findings(result, "MLA002")] == ["bfloat16[32, 2112]"]


@pytest.mark.parametrize("which", ["sgl-deep-gemm", "vllm"])
def test_the_bundled_rules_key_every_argument_of_every_operation_the_wrappers_call(tmp_path, which, request):
    """Against the published extensions' own schemas: an argument left out of the key could pick (and compile) another
    kernel for a call the key says was served before."""
    site = request.getfixturevalue("deep_gemm" if which == "sgl-deep-gemm" else "vllm_deep_gemm")
    module, family = (
        ("deep_gemm", FAMILY) if which == "sgl-deep-gemm" else ("vllm.third_party.deep_gemm", "vllm.deep_gemm")
    )
    done = subprocess.run(
        [sys.executable, "-c", UNKEYED, str(site), str(ROOT / "tests" / "fixtures"), module, family],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "DG_JIT_CACHE_DIR": str(tmp_path / "dg")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert {"fp8_fp4_gemm_nt", "m_grouped_fp8_fp4_gemm_nt_masked"} <= set(answer["observed"])
    assert answer["unkeyed"] == {}
