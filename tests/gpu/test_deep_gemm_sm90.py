"""On an SM90 (or SM100) device with sgl-deep-gemm installed (tests/gpu/README-deep-gemm.md says how to stage it):
DeepGEMM's block-FP8 GEMM compiles and runs for real under `mlacheck run -- ...` (tests/fixtures/programs/
deep_gemm_gpu.py). The warm-up covers small Ms; serving needs a large one, whose kernel (another block_m) compiles on
the serving path: MLA001 names its shape and its measured stall, MLA002 the warm-up shapes never served, and every
output matches torch. The figures land in $OUT/deep_gemm_figures.json where $OUT is set."""

import json
import os
import shutil
import sys

import pytest

from mlacheck.rulefiles import BUNDLED
from tests.integration.cli import ROOT, run_cli

pytestmark = [pytest.mark.gpu]
try:
    deep_gemm = pytest.importorskip("deep_gemm", reason="needs sgl-deep-gemm (tests/gpu/README-deep-gemm.md)")
except OSError as exc:  # the wheel's prebuilt _C.so built against another torch (README-deep-gemm.md)
    pytest.skip(
        f"sgl-deep-gemm's _C.so does not load against this torch: {exc.__cause__ or exc}", allow_module_level=True
    )

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "deep_gemm_gpu.py")
WARMUP, SERVE = (1, 16, 32, 64), (16, 4096)


def test_deep_gemm_serving_path_compiles_are_found_timed_and_outputs_are_right(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    for path in [*BUNDLED.glob("*.toml"), ROOT / "tests" / "fixtures" / "deep_gemm_engine.toml"]:
        shutil.copy(path, rules)
    (rules / "deep_gemm_engine.toml").write_text('[[phase]]\nphase = "warmup"\nfunction = "__main__:warm_up"\n')
    result = run_cli(
        "run", "--rules", str(rules), "--run-dir", str(tmp_path / "run"), "--", sys.executable, PROGRAM,
        tmp_path=tmp_path,
        env_extra={"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                   "DG_JIT_CACHE_DIR": str(tmp_path / "dg"),  # a cold cache: every kernel compiles in this run
                   "DG_GPU_WARMUP": ",".join(map(str, WARMUP)), "DG_GPU_SERVE": ",".join(map(str, SERVE))},
    )  # fmt: skip
    report = result.report
    assert report is not None, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("DEEP_GEMM_FIGURES "))
    figures = json.loads(line.partition(" ")[2])
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "deep_gemm_figures.json"), "w") as out:
            json.dump({"figures": figures, "findings": report["findings"]}, out, indent=1)
    assert figures["worst_diff"] < 1e-3, figures  # every output against torch
    assert report["incomplete"] == [] and report["internal_errors"] == [], result.stdout
    stalls = [f for f in report["findings"] if f["code"] == "MLA001" and f["family"] == "deep_gemm.gemm"]
    assert [f["key"]["a"] for f in stalls] == ["float8_e4m3fn[4096, 7168]"], result.stdout
    [variant] = [
        v
        for family in report["families"]
        if family["name"] == "deep_gemm.gemm"
        for v in family["variants"]
        if v["status"] == "serving-path compile"
    ]
    assert variant["serving_path_compile_s"] > 0.5  # nvcc or NVRTC on the serving path, measured
    dead = {f["key"]["a"] for f in report["findings"] if f["code"] == "MLA002"}
    assert "float8_e4m3fn[16, 7168]" not in dead and "float8_e4m3fn[64, 7168]" in dead
    assert result.code == 1
