"""On a CUDA device that cannot run sm_100a (the H200): trace mode end to end, and execute mode's launch
attempted under a faked capability."""

import subprocess
import sys

import pytest

from tests.integration.cli import ROOT, run_cli

pytestmark = [pytest.mark.gpu, pytest.mark.compile]


def family(report, name):
    return next(f for f in report["families"] if f["name"] == name)


def test_default_prefill_run_in_trace_mode_is_clean_with_fp8_cost(tmp_path):
    result = run_cli("run", "--kernel", "prefill", "--requests", "6", tmp_path=tmp_path)
    assert result.code == 0, result.stdout + result.stderr
    report = result.report
    assert report["mode"] == "trace" and report["findings"] == []
    assert report["scenario"]["launches"] == report["scenario"]["prefill_calls"] + 1 > 1  # + the start-up dummy prefill
    assert report["scenario"]["merge_max_abs_err"] < 1e-3
    for variant in family(report, "tokenspeed_mla.prefill")["variants"]:
        assert variant["numerics"] is None
    for measured in report["scenario"]["measured"]["tokenspeed_mla.prefill"]["variants"]:
        assert measured["tokens"] > 0
        assert 0.9 < measured["fp8_cost"]["cosine_similarity"] < 1.0


def test_sglang_bf16_warmup_in_trace_mode(tmp_path):
    result = run_cli(
        "run",
        "--kernel",
        "prefill",
        "--requests",
        "6",
        "--profile",
        "sglang@0.5.13",
        "--warmup",
        "tests/fixtures/sglang_warmup.py:bf16_warmup",
        tmp_path=tmp_path,
    )
    assert result.code == 1, result.stdout + result.stderr
    findings = result.report["findings"]
    serving = [f for f in findings if f["code"] == "MLA001"]
    assert len(serving) == 3 and all(f["diff"] == {"q_dtype": ["bfloat16", "float8_e4m3fn"]} for f in serving)
    assert len([f for f in findings if f["code"] == "MLA002"]) == 3


def test_decode_in_trace_mode_runs_the_real_dispatch_on_the_device_with_the_targets_sm_count(tmp_path):
    """On the H200 (132 SMs) the dispatch reads the target's 148 SMs: the same variants as the CPU's dry mode."""
    result = run_cli(
        "run",
        "--kernel",
        "decode",
        "--profile",
        "sglang@0.5.13",
        "--cuda-graph-max-bs",
        "8",
        "--batch-sizes",
        "4,16",
        "--compile",
        "skip",
        tmp_path=tmp_path,
    )
    assert result.code == 1, result.stdout + result.stderr
    report = result.report
    assert report["mode"] == "trace" and report["scenario"]["sm_count"].startswith("148")
    [finding] = [f for f in report["findings"] if f["code"] == "MLA001"]
    assert finding["diff"] == {"reducer_max_splits": [16, 4]}
    measured = report["scenario"]["measured"]["tokenspeed_mla.decode"]["variants"]
    assert len(measured) == len(family(report, "tokenspeed_mla.decode")["variants"])
    assert all(v["tokens"] > 0 and 0.9 < v["fp8_cost"]["cosine_similarity"] < 1.0 for v in measured)


FAKE_BLACKWELL = """
import sys, torch
torch.cuda.get_device_capability = lambda device=None: (10, 0)  # only the capability is faked
from mlacheck.cli import app
try:
    app(["run", "--requests", "2"])
except SystemExit as exit:
    code = exit.code
print("context usable:", torch.ones(4, device="cuda").sum().item() == 4)
sys.exit(code)
"""


def test_execute_mode_launch_on_a_device_that_cannot_run_it_fails_in_one_line():
    # In a subprocess: a faked capability also steers Triton's target for the rest of a process.
    done = subprocess.run([sys.executable, "-c", FAKE_BLACKWELL], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = [text for text in done.stderr.splitlines() if text.strip()]
    assert line.startswith("mlacheck: error:") and "execute mode" in line and "Traceback" not in done.stderr
    assert "context usable: True" in done.stdout
