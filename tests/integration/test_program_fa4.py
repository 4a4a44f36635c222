"""Program mode on FlashAttention-4 (a dict inside a JITCache object, reached by a dotted path; lookup by `in`),
its real dispatch under FakeTensorMode on the CPU. Needs the fa4 extra (pip install '.[fa4]')."""

import sys

import pytest

from tests.integration.cli import ROOT, run_cli

pytest.importorskip("flash_attn.cute", reason="FlashAttention-4 is the optional fa4 extra")

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "fa4_engine.py")
FWD = "flash_attn_4.fwd"


def test_a_shape_the_warmup_missed_compiles_on_the_serving_path(tmp_path):
    result = run_cli(
        "run", "--compile", "skip", "--run-dir", str(tmp_path / "run"), "--", sys.executable, PROGRAM, tmp_path=tmp_path
    )
    assert result.code == 1, result.stdout + result.stderr
    assert "fa4 engine done" in result.stdout
    report = result.report
    [family] = [f for f in report["families"] if f["name"] == FWD]
    assert family["version"] == "4.0.0b36" and len(family["key_fields"]) == 64
    by_head_dim = {v["key"]["head_dim"]: v for v in family["variants"]}
    assert by_head_dim[128]["precompiled"] and by_head_dim[128]["compile_phase"] == "warmup"
    assert by_head_dim[128]["dispatches"] == 2  # the two served batches hit the warm-up's variant
    assert by_head_dim[128]["compiled_by"].startswith("tests/fixtures/programs/fa4_engine.py:")
    [finding] = report["findings"]
    assert finding["code"] == "MLA001" and finding["diff"] == {"head_dim": [128, 64], "head_dim_v": [128, 64]}
    assert "(batch_size=1, seqlen_q=256, total_q=256, num_head=16)" in finding["message"]
    assert report["processes"][0]["exited"] and report["incomplete"] == []


NON_CAUSAL = """
import os
os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_100a"); os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "148")
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from flash_attn.cute import flash_attn_func
with FakeTensorMode():
    q, k, v = (torch.empty(1, 512, 8, 128, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    flash_attn_func(q, k, v, causal=False)
print("noncausal forward returned")
"""


@pytest.mark.compile
def test_dry_compiles_need_no_cuda_driver(tmp_path):
    """A non-causal forward's compile asks cutlass.utils.HardwareInfo for the SM count, which needs a CUDA driver;
    --dry answers with the target's for the duration of the dispatch call."""
    program = tmp_path / "noncausal.py"
    program.write_text(NON_CAUSAL)
    without = run_cli(
        "run", "--run-dir", str(tmp_path / "plain"), "--allow-incomplete", "--", sys.executable, str(program)
    )
    assert "noncausal forward returned" not in without.stdout and "cuda" in without.stderr.lower()
    result = run_cli(
        "run", "--dry", "--run-dir", str(tmp_path / "dry"), "--", sys.executable, str(program), tmp_path=tmp_path
    )
    assert "noncausal forward returned" in result.stdout, result.stdout + result.stderr
    [family] = [f for f in result.report["families"] if f["name"] == FWD]
    [variant] = family["variants"]
    assert variant["serving_path_compile_s"] > 0.5 and variant["key"]["causal"] is False
    assert result.report["unwatched_compiles"] == []  # the compile net leaves FA4's own compile to its family
