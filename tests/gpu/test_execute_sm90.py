"""Execute mode on a Hopper GPU (the team's H200): FlashAttention-4's SM90 forward runs vLLM's Blackwell prefill path
for real, compiled on the device (the stalls are the device's), every launch compared with the FP32 reference. The
figures go to $MLACHECK_GPU_OUT (tests/gpu/device_run.sh points it at the device tool's $OUT)."""

import json
import os
import sys

import pytest
import torch

from tests.integration.cli import ROOT, run_cli

pytestmark = [pytest.mark.gpu, pytest.mark.compile]
pytest.importorskip("flash_attn.cute", reason="FlashAttention-4 is the optional fa4 extra")
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("needs a Hopper GPU (sm_90)", allow_module_level=True)

FWD = "flash_attn_4.fwd"


def keep(name: str, data: dict) -> None:
    folder = os.environ.get("MLACHECK_GPU_OUT")
    if folder:
        with open(os.path.join(folder, name), "w") as out:
            json.dump(data, out, indent=1)


def test_vllm_fa4_prefill_executes_on_the_h200_with_real_stalls_and_numerics(tmp_path):
    result = run_cli("run", "--profile", "vllm", "--kernel", "prefill", "--requests", "6", tmp_path=tmp_path)
    keep("execute_vllm_fa4.json", result.report or {"stdout": result.stdout, "stderr": result.stderr})
    assert result.report is not None, result.stdout + result.stderr
    report = result.report
    assert (report["mode"], report["target_arch"]) == ("execute", "sm_90a"), result.stdout
    [fwd] = [family for family in report["families"] if family["name"] == FWD]
    serving = [v for v in fwd["variants"] if v["serving_path_compile_s"] is not None]
    assert serving and all(v["serving_path_compile_s"] > 0.5 for v in serving)  # real SM90 compiles on the device
    measured = [v for v in fwd["variants"] if v["numerics"]]
    assert measured and all(v["numerics"]["cosine_similarity"] > 0.999 for v in measured)
    assert [f for f in report["findings"] if f["code"] == "MLA005"] == []


PROGRAM = """
import torch
from flash_attn.cute.interface import flash_attn_varlen_func
import mlacheck

def prefill(seqs, length, causal, lse):
    q = torch.randn(seqs * length, 16, 192, dtype=torch.bfloat16, device="cuda")
    k = torch.randn_like(q)
    v = torch.randn(seqs * length, 16, 128, dtype=torch.bfloat16, device="cuda")
    cu = torch.arange(0, (seqs + 1) * length, length, dtype=torch.int32, device="cuda")
    out, _ = flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=length,
                                    max_seqlen_k=length, causal=causal, return_lse=lse)  # (out, lse) either way
    return out

prefill(2, 512, True, True)  # warm-up: causal with LSE
mlacheck.serving_started()
out = prefill(2, 512, True, False)  # serving: causal without LSE, a variant the warm-up missed
torch.cuda.synchronize()
print("program done", float(out.float().abs().sum()) > 0)
"""


def test_program_mode_on_the_device_reads_its_target_arch_and_times_the_stall(tmp_path):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    env = {name: value for name, value in os.environ.items() if name != "CUTE_DSL_ARCH"}
    os.environ.pop("CUTE_DSL_ARCH", None)
    result = run_cli(
        "run",
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        str(program),
        tmp_path=tmp_path,
        env_extra={"PYTHONPATH": env.get("PYTHONPATH", str(ROOT))},
    )
    keep("program_fa4_sm90.json", result.report or {"stdout": result.stdout, "stderr": result.stderr})
    assert result.code == 1, result.stdout + result.stderr
    assert "program done True" in result.stdout
    assert result.report["target_arch"] == "sm_90a"  # read from the device: no variable named it
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert "lse_is_none" in finding["diff"] and "s stall" in finding["message"]


def test_vllm_profile_executes_fa4_here_and_traces_tokenspeed_mla_decode_for_sm_100a(tmp_path):
    """The H200 runs FA4's SM90 forward, not tokenspeed_mla's decode: one run, two parts, each family's mode said."""
    result = run_cli("run", "--profile", "vllm", "--requests", "6", tmp_path=tmp_path)
    keep("mixed_vllm.json", result.report or {"stdout": result.stdout, "stderr": result.stderr})
    assert result.report is not None, result.stdout + result.stderr
    report = result.report
    assert report["mode"] == "mixed" and report["internal_errors"] == [], result.stdout
    modes = {family["name"]: (family["mode"], family["target_arch"]) for family in report["families"]}
    assert modes[FWD] == ("execute", "sm_90a") and modes["tokenspeed_mla.decode"] == ("trace", "sm_100a")
    [fwd] = [family for family in report["families"] if family["name"] == FWD]
    assert any(v["numerics"] for v in fwd["variants"])  # FA4 launched and was measured
    [decode] = [family for family in report["families"] if family["name"] == "tokenspeed_mla.decode"]
    assert all(v["numerics"] is None for v in decode["variants"])  # traced: nothing of it launched
    assert "modes" in {row[0] for row in report["scenario"]["header"]}
