"""On two GPUs of one host (the device tool's nvidia-h200-x2 kind): the TP-2 program of
tests/integration/test_program_tp2.py for real under `mlacheck run -- torchrun --nproc-per-node 2 ...`: NCCL between
the ranks, FA4's SM90 forward compiled and launched on each, rank 0's serving-path compile reported on rank 0 with its
measured stall, rank 1's wait for it at the all-reduce as its slow step, and the HTML report (with each rank's
timeline) written to $MLACHECK_GPU_OUT."""

import os
import sys
from pathlib import Path

import pytest
import torch

from tests.integration.cli import ROOT, run_cli

pytestmark = [pytest.mark.gpu]

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "tp2_engine.py")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices of one host")
def test_two_ranks_on_two_gpus_each_report_their_own_serving_path_compile(tmp_path):
    out = os.environ.get("MLACHECK_GPU_OUT", str(tmp_path))
    result = run_cli(
        "run", "--step", "tp2_runner:ModelRunner.execute_step", "--output", f"html:{out}/tp2.html",
        "--run-dir", str(tmp_path / "run"), "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", PROGRAM, tmp_path=tmp_path,
        env_extra={"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
    )  # fmt: skip
    report = result.report
    assert report is not None and result.code == 1, result.stdout + result.stderr
    (Path(out) / "tp2.txt").write_text(result.stdout)
    (Path(out) / "tp2.json").write_text((tmp_path / "report.json").read_text())
    assert report["target_arch"].startswith("sm_90") and report["incomplete"] == []
    [finding] = report["findings"]
    assert (
        finding["code"] == "MLA001" and finding["process"]["rank"] == 0 and finding["diff"] == {"causal": [True, False]}
    )
    by_rank = {row["rank"]: row for row in report["ranks"]}
    assert by_rank[0]["serving_path_compiles"] == 1 and by_rank[1]["serving_path_compiles"] == 0
    assert by_rank[1]["waited_for_pids"] == by_rank[0]["pids"]  # rank 1 waited at the all-reduce for rank 0's compile
