"""Program mode with Triton kernels (tests/fixtures/programs/triton_kernels.py) under `mlacheck run --dry` on this
CPU: every launch's key is computed by Triton's own binder for the target arch, nothing launches, and each
serving launch the warm-up missed names the parameter whose specialization differs."""

import os
import sys

import pytest

from tests.conftest import checked_triton
from tests.integration.cli import ROOT, run_cli

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "triton_kernels.py")
# the Triton the test runs under is the program's too (a PYTHONPATH given, e.g. a --target install of 3.6, is kept)
ENV = {
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    "TRITON_DEFAULT_FP_FUSION": "1",
}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("triton")
    result = run_cli(
        "run", "--dry", "--compile", "skip", "--arch", "sm_90a", "--run-dir", str(tmp_path / "run"), "--",
        sys.executable, PROGRAM, "--cpu", tmp_path=tmp_path, env_extra=ENV,
    )  # fmt: skip
    assert result.report is not None, result.stdout + result.stderr
    return result


def findings(report, kernel, code="MLA001"):
    return [f for f in report["findings"] if f["family"] == f"triton:__main__.{kernel}" and f["code"] == code]


@pytest.mark.parametrize(
    ("kernel", "diff"),
    [
        ("strided_copy", {"stride": ["==1", "i32 not%16"]}),
        ("add_one", {"x_ptr": ["*bf16 aligned16", "*bf16 unaligned"]}),
        ("row_sum", {"n_cols": ["i32 %16", "i32 not%16"]}),
        ("quantize", {"USE_PDL": ["constexpr True", "constexpr False"]}),
        ("offset_load", {"offset": ["i32 %16", "i64 %16"]}),
    ],
)
def test_each_serving_launch_the_warm_up_missed_names_its_parameter(dry_run, kernel, diff):
    [finding] = findings(dry_run.report, kernel)
    assert finding["diff"] == diff
    assert finding["site"].startswith("tests/fixtures/programs/triton_kernels.py:")
    assert "not measured" in finding["message"]  # --compile skip: keys only


def test_a_constexpr_fed_the_token_count_is_one_finding(dry_run):
    assert findings(dry_run.report, "gather_tokens") == []
    [unbounded] = findings(dry_run.report, "gather_tokens", "MLA008")
    assert unbounded["diff"]["NUM_TOKENS"][1] == [f"constexpr {n}" for n in (37, 41, 53, 77, 99)]


def test_the_kernel_served_as_warmed_up_is_clean_and_counted(dry_run):
    report = dry_run.report
    assert [f for f in report["findings"] if f["family"] == "triton:__main__.clean"] == []
    [clean] = [f for f in report["families"] if f["name"] == "triton:__main__.clean"]
    [variant] = clean["variants"]
    assert (variant["status"], variant["dispatches"], variant["warmup_dispatches"]) == ("ok", 3, 1)
    [dead] = findings(report, "strided_copy", "MLA002")  # the warm-up's BLOCK=256 was never launched
    assert dead["key"]["BLOCK"] == "constexpr 256"


def test_a_tuning_on_the_serving_path_is_a_stall(dry_run):
    [tuning] = [f for f in dry_run.report["findings"] if f["family"] == "triton:__main__.tuned:autotune"]
    assert tuning["code"] == "MLA001" and tuning["diff"] == {"n": [4096, 1000]}


def test_the_run_reads_as_a_dry_run_for_the_target(dry_run):
    report = dry_run.report
    assert report["target_arch"] == "sm_90a" and report["program"]["exit_code"] == 0
    assert dry_run.code == 1 and report["verdict"] == "fail"
    assert all(f["discovered"] for f in report["families"])
    assert "1 more kernel family found at run time without findings" in dry_run.stdout  # clean, summed up
    assert "triton:__main__.clean" not in dry_run.stdout


def test_real_compiles_for_the_target_on_the_cpu_time_the_stall_and_chained_hooks_keep_working(tmp_path):
    """Triton compiles for sm_100a on this CPU (its bundled ptxas): stalls are timed. The program's hook, chained
    onto mlacheck's after import as vLLM's jit_monitor chains, is called for every compile; when it raises before
    calling mlacheck's (vLLM's error mode), the program sees the error, and the compile is recorded all the same."""
    result = run_cli(
        "run", "--dry", "--arch", "sm_100a", "--", sys.executable, PROGRAM, "raising", "--cpu",
        tmp_path=tmp_path, env_extra={**ENV, "TRITON_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    report = result.report
    assert report is not None and report["target_arch"] == "sm_100a", result.stdout + result.stderr
    assert "hook raised: JIT compile while serving: quantize" in result.stdout
    [finding] = findings(report, "quantize")
    assert finding["diff"] == {"USE_PDL": ["constexpr True", "constexpr False"]}
    assert "s stall" in finding["message"] and "not measured" not in finding["message"]
    compiles = sum(
        v["precompiled"] or v["serving_path_compile_s"] is not None
        for f in report["families"]
        if not f["name"].endswith(":autotune")
        for v in f["variants"]
    )
    assert f"chained hook calls: {compiles}" in result.stdout
    assert report["internal_errors"] == [] and report["incomplete"] == []


def test_an_arch_triton_has_no_kernels_for_is_refused_in_one_line(tmp_path):
    result = run_cli("run", "--dry", "--arch", "sm_75", "--", sys.executable, PROGRAM, tmp_path=tmp_path, env_extra=ENV)
    assert result.code == 2 and result.stderr.startswith("mlacheck: error: --arch sm_75:")
    assert "sm_90a" in result.stderr and "Traceback" not in result.stderr


FORK_PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "triton_fork_kernels.py")


def fork_run(tmp_path, env_extra=None):
    return run_cli(
        "run", "--dry", "--compile", "skip", "--arch", "sm_100a", "--", sys.executable, FORK_PROGRAM, "--cpu",
        tmp_path=tmp_path, env_extra={**ENV, **(env_extra or {})},
    )  # fmt: skip


@checked_triton("tokenspeed_triton")
def test_kernels_compiled_through_tokenspeed_triton_are_watched_as_stock_triton_kernels_are(tmp_path):
    """TokenSpeed's Triton fork, found by the bundled tokenspeed_triton.toml ([triton] module = "tokenspeed_triton"):
    its kernels have their keys, a serving launch the warm-up missed is MLA001 naming the parameters that differ,
    its tunings are watched too; stock Triton's kernels in the same process are watched beside them."""
    from importlib import metadata

    result = fork_run(tmp_path)
    report = result.report
    assert report is not None and report["internal_errors"] == [], result.stdout + result.stderr
    serving = {(f["family"], f["code"]): f for f in report["findings"]}
    pack = serving[("tokenspeed_triton:__main__.pack", "MLA001")]
    assert pack["diff"] == {
        "BLOCK_S": ["constexpr 1", "constexpr 4"],
        "options": ["num_warps=1, num_stages=2", "num_warps=2, num_stages=3"],
    }
    assert serving[("tokenspeed_triton:__main__.tuned:autotune", "MLA001")]["diff"] == {"n": [4096, 1000]}
    families = {family["name"]: family for family in report["families"]}
    assert report["versions"]["tokenspeed_triton:__main__.pack"] == metadata.version("tokenspeed-triton")
    for name in ("triton:tests.fixtures.triton_copy.copy", "tokenspeed_triton:__main__.copy"):
        [variant] = families[name]["variants"]
        assert (variant["status"], variant["dispatches"]) == ("ok", 1), name
    assert result.code == 1 and report["verdict"] == "fail" and report["incomplete"] == []


def test_under_the_interpreter_nothing_compiles_and_each_triton_is_named_never_an_internal_error(tmp_path):
    """TRITON_INTERPRET=1 (Triton's CPU interpreter) for both Tritons: autotuners over interpreted kernels are no
    internal error (they were: 'function' object has no attribute 'fn'), the program runs, and the report names each
    Triton it ran interpreted; with nothing else watched, nothing was checked: not a pass."""
    result = fork_run(tmp_path, {"TRITON_INTERPRET": "1"})
    report = result.report
    assert report is not None and report["internal_errors"] == [], result.stdout + result.stderr
    assert report["program"]["exit_code"] == 0 and "done" in result.stdout
    named = [line.partition(":")[0] for line in report["not_checked"] if "ran its Triton kernels interpreted" in line]
    assert named == ["tokenspeed_triton", "triton"]
    assert report["findings"] == [] and report["verdict"] == "incomplete" and result.code == 2
    assert "not checked: tokenspeed_triton: the program ran its Triton kernels interpreted" in result.stdout


@checked_triton("tokenspeed_triton")
def test_real_compiles_through_the_fork_on_the_cpu_time_its_stalls(tmp_path):
    """tokenspeed_triton compiles for sm_100a on this CPU with its own ptxas: the fork's serving-path stall is timed."""
    result = run_cli(
        "run", "--dry", "--arch", "sm_100a", "--", sys.executable, FORK_PROGRAM, "--cpu",
        tmp_path=tmp_path, env_extra={**ENV, "TRITON_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    report = result.report
    assert report is not None and report["internal_errors"] == [], result.stdout + result.stderr
    [pack] = [f for f in report["findings"] if f["family"] == "tokenspeed_triton:__main__.pack"]
    assert pack["code"] == "MLA001" and "s stall" in pack["message"] and "not measured" not in pack["message"]
    assert any(path.name.endswith(".cubin") for path in (tmp_path / "cache").rglob("*"))  # the fork's own compile


def dry_program(tmp_path, text: str, arch: str, printed: str) -> dict:
    """The report of a program written from `text` under `mlacheck run --dry --arch ARCH` (a Triton cache of its own),
    which printed `printed`."""
    path = tmp_path / "program.py"
    path.write_text(text)
    result = run_cli(
        "run", "--dry", "--arch", arch, "--", sys.executable, str(path), tmp_path=tmp_path,
        env_extra={**ENV, "TRITON_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert result.report is not None and printed in result.stdout, result.stdout + result.stderr
    return result.report


COPY = """
@triton.jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

x, y = torch.zeros(4096), torch.zeros(4096)
"""  # a kernel of the programs below, and its tensors
DIRECT = (
    """
import sys, torch, mlacheck
import {triton} as triton, {triton}.language as tl
from {triton}.backends.compiler import GPUTarget
from {triton}.compiler import ASTSource
"""
    + COPY
    + """copy[(1,)](x, y, 64, BLOCK=64)  # warm-up
mlacheck.serving_started()
copy[(1,)](x, y, 64, BLOCK=64)  # a hit
signature = {{"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}}
built = triton.compile(ASTSource(fn=copy, signature=signature, constexprs={{"BLOCK": 128}}), target=GPUTarget("cuda", 100, 32))
print("built", built.name)
"""
)


@pytest.mark.parametrize("triton", ["triton", "tokenspeed_triton"])
def test_a_direct_triton_compile_of_a_watched_kernel_on_the_serving_path_is_named(tmp_path, triton):
    """A launcher that keeps what it compiles itself (`triton.compile(ASTSource(fn=kernel, ...))`): no cache of the
    kernel holds the build, so no dispatch accounts for it; on the serving path it is MLA007, never a PASS."""
    report = dry_program(tmp_path, DIRECT.format(triton=triton), "sm_100a", printed="built copy")
    [finding] = [f for f in report["findings"] if f["code"] == "MLA007"]
    assert finding["family"] == "unwatched:__main__:copy" and finding["key"] == {"BLOCK": 128}, finding
    assert report["verdict"] == "fail" and report["internal_errors"] == []


ASYNC = (
    """
import threading, torch, mlacheck, triton, triton.language as tl
from concurrent.futures import ThreadPoolExecutor
from triton.runtime._async_compile import AsyncCompileMode
"""
    + COPY
    + """pool, gate = ThreadPoolExecutor(1), threading.Event()
pool.submit(gate.wait)  # the pool's one thread is held until the gate opens: the compiles below queue behind it
with AsyncCompileMode(pool):
    for block in (64, 128):
        copy.warmup(x, y, 63, BLOCK=block, grid=(1,))  # each compile begins in the warm-up, in the background
    mlacheck.serving_started()
    threading.Timer(0.5, gate.set).start()
    served = copy[(1,)](x, y, 63, BLOCK=128)  # its warm-up's compile has not finished: the launch waits for it
    print("served", type(served).__name__, flush=True)
    copy[(1,)](x, y, 63, BLOCK=256)  # its compile begins on the serving path, and the launch waits for it
"""
)


@pytest.fixture(scope="module")
def async_run(tmp_path_factory):
    return dry_program(tmp_path_factory.mktemp("async"), ASYNC, "sm_90a", printed="served FutureKernel")


def async_variants(report) -> dict:
    return {v["key"]["BLOCK"]: v for f in report["families"] for v in f["variants"]}


def test_a_serving_launch_of_a_variant_still_compiling_asynchronously_is_counted(async_run):
    """Triton's AsyncCompileMode: the launch finds the warm-up's FutureKernel in the cache; it is a dispatch of that
    variant (its warm-up is not dead: no MLA002 for it), the other warm-up variant is."""
    variants = async_variants(async_run)
    assert (variants["constexpr 128"]["dispatches"], variants["constexpr 128"]["precompiled"]) == (1, True)
    assert variants["constexpr 64"]["status"] == "dead warm-up", variants
    assert async_run["internal_errors"] == [] and async_run["incomplete"] == []


def test_a_serving_launch_that_waits_for_a_warm_up_compile_still_running_is_a_timed_stall(async_run):
    """The warm-up began the compile but serving started before it finished: the serving launch waited for it (at
    least the 0.5 s the pool was held). That wait is a stall of the serving path, MLA001 of that variant, told as a
    warm-up that did not finish in time (not as a missing one), and the run cannot pass."""
    [finding] = [f for f in async_run["findings"] if f["code"] == "MLA001" and f["key"]["BLOCK"] == "constexpr 128"]
    assert "still compiling" in finding["message"] and "had not finished when serving started" in finding["message"]
    assert "dropped" not in finding["message"] and finding["diff"] == {}, finding
    variant = async_variants(async_run)["constexpr 128"]
    assert variant["status"] == "serving-path compile" and variant["compile_phase"] == "warmup", variant
    assert variant["serving_path_compile_s"] >= 0.5, variant
    assert async_run["verdict"] == "fail"


def test_an_async_compile_that_began_on_the_serving_path_stays_a_timed_serving_path_compile(async_run):
    [finding] = [f for f in async_run["findings"] if f["code"] == "MLA001" and f["key"]["BLOCK"] == "constexpr 256"]
    assert "compiled on the serving path" in finding["message"] and "not measured" not in finding["message"]
    variant = async_variants(async_run)["constexpr 256"]
    assert not variant["precompiled"] and variant["serving_path_compile_s"] > 0, variant


ASYNC_DONE = (
    """
import torch, mlacheck, triton, triton.language as tl
from concurrent.futures import ThreadPoolExecutor
from triton.runtime._async_compile import AsyncCompileMode
"""
    + COPY
    + """with AsyncCompileMode(ThreadPoolExecutor(1)):
    warmed = copy.warmup(x, y, 63, BLOCK=128, grid=(1,))
    warmed.future.result()  # its compile is done; the cache still holds its FutureKernel, which the launch finishes
    mlacheck.serving_started()
    served = copy[(1,)](x, y, 63, BLOCK=128)
    print("served", type(served).__name__, flush=True)
"""
)


def test_a_serving_launch_of_an_async_compile_already_done_is_no_stall(tmp_path):
    """The launch finds the warm-up's FutureKernel, but its compile was done before serving needed it: it waits for
    nothing, and the run passes (no false MLA001)."""
    report = dry_program(tmp_path, ASYNC_DONE, "sm_90a", printed="served FutureKernel")
    [variant] = async_variants(report).values()
    assert (variant["status"], variant["dispatches"]) == ("ok", 1), variant
    assert report["findings"] == [] and report["verdict"] == "pass", report["findings"]
