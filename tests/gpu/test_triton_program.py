"""On a CUDA device: a real Triton program under `mlacheck run -- ...` (tests/fixtures/programs/triton_kernels.py):
its kernels compile and run for real, and each serving launch the warm-up missed is a timed serving-path stall."""

import os
import sys

import pytest

from tests.integration.cli import ROOT, run_cli

pytestmark = [pytest.mark.gpu]

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "triton_kernels.py")


def test_a_triton_program_on_the_device_reports_its_real_serving_path_stalls(tmp_path):
    result = run_cli(
        "run", "--", sys.executable, PROGRAM, "raising", tmp_path=tmp_path,
        env_extra={"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                   "TRITON_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    report = result.report
    assert report is not None and result.code == 1, result.stdout + result.stderr
    assert report["mode"] == "program" and report["program"]["exit_code"] == 0
    assert report["target_arch"].startswith("sm_") and report["incomplete"] == [] and report["internal_errors"] == []
    by_kernel = {f["family"].rpartition(".")[2]: f for f in report["findings"] if f["code"] == "MLA001"}
    expected = {
        "strided_copy": {"stride": ["==1", "i32 not%16"]},
        "add_one": {"x_ptr": ["*bf16 aligned16", "*bf16 unaligned"]},
        "row_sum": {"n_cols": ["i32 %16", "i32 not%16"]},
        "quantize": {"USE_PDL": ["constexpr True", "constexpr False"]},
        "offset_load": {"offset": ["i32 %16", "i64 %16"]},
        "tuned:autotune": {"n": [4096, 1000]},
    }
    for kernel, diff in expected.items():
        assert by_kernel[kernel]["diff"] == diff, kernel
    families = {f["name"].rpartition(".")[2]: f for f in report["families"]}
    for kernel in ("strided_copy", "add_one", "row_sum", "quantize", "offset_load"):
        [stall] = [v for v in families[kernel]["variants"] if v["status"] == "serving-path compile"]
        assert stall["serving_path_compile_s"] > 0, kernel  # a real compile on the serving path, timed
    [tuning] = [v for v in families["tuned:autotune"]["variants"] if v["status"] == "serving-path compile"]
    assert tuning["serving_path_compile_s"] > 0  # the benchmarks of the configs, on the device
    # the token counts served are one MLA008; the warm-up's NUM_TOKENS=16, never served, is a dead warm-up
    gather = [f for f in report["findings"] if f["family"].endswith(".gather_tokens")]
    assert [f["code"] for f in gather] == ["MLA008", "MLA002"]
    assert gather[1]["key"]["NUM_TOKENS"] == "constexpr 16"
    [clean] = families["clean"]["variants"]
    assert (clean["status"], clean["dispatches"]) == ("ok", 3)
    assert "hook raised: JIT compile while serving: quantize" in result.stdout


def test_kernels_compiled_through_tokenspeed_triton_stall_for_real_on_the_device(tmp_path):
    """TokenSpeed's Triton fork on the device (tests/fixtures/programs/triton_fork_kernels.py): its kernels compile and
    run; the serving launch in a block-size bucket the warm-up missed is a timed MLA001 of the fork's family."""
    import triton

    tokenspeed_triton = pytest.importorskip(
        "tokenspeed_triton", reason="needs tokenspeed-triton (the lite device run has none)"
    )
    if tokenspeed_triton is triton:  # the GPU machine's stand-in (../shared/device/shim): one Triton under two names
        pytest.skip("needs the real tokenspeed-triton wheel; the GPU machine's tokenspeed_triton is its image's triton")
    program = str(ROOT / "tests" / "fixtures" / "programs" / "triton_fork_kernels.py")
    result = run_cli(
        "run", "--", sys.executable, program, tmp_path=tmp_path,
        env_extra={"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                   "TRITON_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    report = result.report
    assert report is not None and report["program"]["exit_code"] == 0, result.stdout + result.stderr
    assert report["incomplete"] == [] and report["internal_errors"] == []
    [pack] = [f for f in report["findings"] if f["family"] == "tokenspeed_triton:__main__.pack"]
    assert pack["code"] == "MLA001" and pack["diff"]["BLOCK_S"] == ["constexpr 1", "constexpr 4"]
    assert "s stall" in pack["message"]
