"""On an SM90 (or SM100) device with a DeepGEMM there (tests/gpu/README-deep-gemm.md says how to stage one): DeepGEMM's
block-FP8 GEMM compiles and runs for real under `mlacheck run -- ...` (tests/fixtures/programs/deep_gemm_gpu.py),
through sgl-deep-gemm 0.2.5 (`deep_gemm`) and through vLLM 0.34.0's vendored copy (`vllm.third_party.deep_gemm`, its
package's own __init__ files stubbed as tests/integration/test_program_deep_gemm.py does). The warm-up covers small
Ms; serving needs a large one, whose kernel (another block_m) compiles on the serving path: MLA001 names its shape and
its measured stall, MLA002 the warm-up shapes never served, and every output matches torch. The figures land in
$OUT/deep_gemm_figures-<family>.json where $OUT is set."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from mlacheck.rulefiles import BUNDLED
from tests.integration.cli import ROOT, run_cli

pytestmark = [pytest.mark.gpu]
PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "deep_gemm_gpu.py")
WARMUP, SERVE = (1, 16, 32, 64), (16, 4096)
# (module, family, the folder it is found in: None where it is installed)
DEEP_GEMMS = {
    "sgl-deep-gemm": ("deep_gemm", "deep_gemm.gemm", None),
    "vllm-vendored": (
        "vllm.third_party.deep_gemm",
        "vllm.deep_gemm",
        os.environ.get("MLACHECK_VLLM_DEEP_GEMM_SITE", "/tmp/vllm-deep-gemm-site"),
    ),
}


def python_path(site):
    return os.pathsep.join(filter(None, [site, str(ROOT), os.environ.get("PYTHONPATH")]))


def importable(module, site):
    """Skip, saying why, where this DeepGEMM is absent or its extension does not load against this torch."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": python_path(site)},
    )  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        pytest.skip(f"{module} does not import here (README-deep-gemm.md): {last}")


def observed(tmp_path, which, name, **env):
    """The program under `mlacheck run` (a cold DeepGEMM cache: every kernel compiles in this run): its result, report
    and figures, kept in $OUT/deep_gemm_<name>-<family>.json where $OUT is set."""
    module, family, site = DEEP_GEMMS[which]
    importable(module, site)
    rules = tmp_path / "rules"
    rules.mkdir()
    for path in BUNDLED.glob("*.toml"):
        shutil.copy(path, rules)
    (rules / "deep_gemm_engine.toml").write_text('[[phase]]\nphase = "warmup"\nfunction = "__main__:warm_up"\n')
    result = run_cli(
        "run", "--rules", str(rules), "--run-dir", str(tmp_path / "run"), "--", sys.executable, PROGRAM,
        tmp_path=tmp_path,
        env_extra={"PYTHONPATH": python_path(site), "DG_GPU_MODULE": module, "DG_JIT_CACHE_DIR": str(tmp_path / "dg"),
                   **env},
    )  # fmt: skip
    report = result.report
    assert report is not None, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("DEEP_GEMM_FIGURES "))
    figures = json.loads(line.partition(" ")[2])
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"deep_gemm_{name}-{family}.json"), "w") as out:
            json.dump({"figures": figures, "findings": report["findings"], "stdout": result.stdout}, out, indent=1)
    return result, report, figures


@pytest.mark.parametrize("which", sorted(DEEP_GEMMS))
def test_deep_gemm_serving_path_compiles_are_found_timed_and_outputs_are_right(tmp_path, which):
    family = DEEP_GEMMS[which][1]
    result, report, figures = observed(tmp_path, which, "figures", DG_GPU_WARMUP=",".join(map(str, WARMUP)),
                                       DG_GPU_SERVE=",".join(map(str, SERVE)))  # fmt: skip
    assert figures["worst_diff"] < 1e-3, figures  # every output against torch
    assert report["incomplete"] == [] and report["internal_errors"] == [], result.stdout
    stalls = [f for f in report["findings"] if f["code"] == "MLA001" and f["family"] == family]
    assert [f["key"]["a"] for f in stalls] == ["float8_e4m3fn[4096, 7168]"], result.stdout
    [variant] = [
        v
        for reported in report["families"]
        if reported["name"] == family
        for v in reported["variants"]
        if v["status"] == "serving-path compile"
    ]
    assert variant["serving_path_compile_s"] > 0.5  # nvcc or NVRTC on the serving path, measured
    dead = {f["key"]["a"] for f in report["findings"] if f["code"] == "MLA002"}
    assert "float8_e4m3fn[16, 7168]" not in dead and "float8_e4m3fn[64, 7168]" in dead
    # M=16 runs the kernel a smaller M's warm-up built (DeepGEMM picks it by M in C++): no warm-up is called wasted
    assert all("not known to be wasted" in f["message"] for f in report["findings"] if f["code"] == "MLA002")
    assert result.code == 1


@pytest.mark.parametrize("which", sorted(DEEP_GEMMS))
def test_a_layout_kernel_no_rule_keys_compiled_on_the_serving_path_is_mla007_and_its_output_is_right(tmp_path, which):
    """DeepGEMM JIT-builds its scale-factor transpose (csrc/jit_kernels/impls/smxx_layout.hpp) at the first call of a
    row length: netted, not keyed (capture/caches/jit_net.py), so a serving-path build is named with its measured time.
    (The GEMM builds the one of its own activation scales in the warm-up: the layout served is another row length's.
    On the H100, 2026-12-05, with the GEMM's own row length, no kernel was built and none was reported.)"""
    result, report, figures = observed(tmp_path, which, "layout", DG_GPU_WARMUP="16", DG_GPU_SERVE="16",
                                       DG_GPU_LAYOUT_SERVE="1")  # fmt: skip
    assert [entry["equal"] for entry in figures["layout"]] == [True], figures
    assert report["incomplete"] == [] and report["internal_errors"] == [], result.stdout
    assert not [f for f in report["findings"] if f["code"] == "MLA001"], result.stdout
    [netted] = [f for f in report["findings"] if f["code"] == "MLA007"]
    assert netted["family"].endswith(".get_mn_major_tma_aligned_tensor"), netted
    assert "s serving-path compile" in netted["summary"] and result.code == 1, result.stdout
