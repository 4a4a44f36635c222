"""A CUDA worker's end on the device (program/ending.py with torch and CUDA loaded in the worker): one killed by
SIGABRT or SIGSEGV after it served part of its traffic is cut short (its unreached warm-up unverified, the run
incomplete), one that exits 0 keeps its dead warm-up; the worker's status is its own either way."""

import os
import sys

import pytest

from mlacheck.program import ending
from tests.integration.cli import ROOT, run_cli

pytestmark = [pytest.mark.gpu]

WORKER = """
import os, signal, subprocess, sys
WORKER = '''
import os, signal, sys, torch, mlacheck
from tests.fixtures import synthetic_kernels as k
x = torch.randn(256, 256, device="cuda")
(x @ x).sum().item()
k.warmup(dtypes=("fp8", "bf16"), causal=(True,))
mlacheck.serving_started()
k.dispatch(1, "fp8", True)
'''
print("worker rc", subprocess.run([sys.executable, "-c", WORKER + {end!r}]).returncode, flush=True)
"""
ENDS = {"exit 0": ("sys.exit(0)", 0, None), "abort": ("os.abort()", -6, "SIGABRT")}
ENDS["SIGSEGV"] = ("os.kill(os.getpid(), signal.SIGSEGV)", -11, "SIGSEGV")


@pytest.mark.skipif(ending._ending is None, reason="mlacheck.program._ending was not built")
@pytest.mark.parametrize("end", ENDS)
def test_a_cuda_workers_end_is_told(tmp_path, end):
    text, status, signame = ENDS[end]
    path = tmp_path / "program.py"
    path.write_text(WORKER.format(end=text))
    rules = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    result = run_cli(
        "run", "--rules", rules, "--run-dir", str(tmp_path / "run"), "--", sys.executable, str(path),
        tmp_path=tmp_path, env_extra={"PYTHONPATH": pythonpath},
    )  # fmt: skip
    assert f"worker rc {status}" in result.stdout and result.report is not None, result.stdout + result.stderr
    statuses = {v["key"]["dtype"]: v["status"] for f in result.report["families"] for v in f["variants"]}
    if signame is None:
        assert result.report["verdict"] == "pass" and statuses == {"fp8": "ok", "bf16": "dead warm-up"}
    else:
        assert result.report["verdict"] == "incomplete" and statuses == {"fp8": "ok", "bf16": "unverified"}
        assert any(f"was killed by {signame}" in reason for reason in result.report["incomplete"])
