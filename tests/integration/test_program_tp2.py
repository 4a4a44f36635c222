"""Per-rank observation of a tensor-parallel job (issue 32), on two CPU ranks: torchrun starts
tests/fixtures/programs/tp2_engine.py with the gloo backend under `mlacheck run --dry --step ...`; each rank warms FA4's
forward (its own dispatch on FakeTensorMode tensors, real sm_100a compiles) and a Triton kernel up, joins an all-reduce
each step, and rank 0 alone meets a context chunk its warm-up missed, while rank 1 waits for it at the all-reduce.
tests/gpu/test_tp2_two_gpus.py runs the same program on two GPUs with NCCL."""

import subprocess
import sys

import pytest

from tests.integration.cli import ROOT, run_cli

pytest.importorskip("flash_attn.cute", reason="FlashAttention-4 is the optional fa4 extra")
pytest.importorskip("triton", reason="the program's Triton kernel")

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "tp2_engine.py")
STEP = "tp2_runner:ModelRunner.execute_step"  # the engine's step function


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("tp2")
    result = run_cli(
        "run", "--dry", "--step", STEP, "--output", f"html:{tmp_path / 'tp2.html'}", "--run-dir", str(tmp_path / "run"),
        "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", PROGRAM, tmp_path=tmp_path,
    )  # fmt: skip
    assert result.report is not None, result.stdout + result.stderr
    result.html = (tmp_path / "tp2.html").read_text()
    return result


def test_every_rank_is_observed_and_ends(tp2):
    assert "rank 0 done" in tp2.stdout and "rank 1 done" in tp2.stdout
    ranks = {process["rank"]: process for process in tp2.report["processes"]}
    assert set(ranks) == {0, 1, None}  # the two ranks and torchrun itself
    assert all(process["exited"] for process in tp2.report["processes"])
    assert tp2.report["incomplete"] == []


def test_the_serving_path_compile_is_reported_on_the_rank_that_made_it_with_its_stall(tp2):
    assert tp2.code == 1 and tp2.report["verdict"] == "fail"
    [finding] = tp2.report["findings"]
    assert finding["code"] == "MLA001" and finding["family"] == "flash_attn_4.fwd"
    assert finding["process"]["rank"] == 0 and finding["diff"] == {"causal": [True, False]}
    [variant] = [
        v for f in tp2.report["families"] if f["name"] == "flash_attn_4.fwd" for v in f["variants"]
        if v["key"]["causal"] is False
    ]  # fmt: skip
    assert variant["serving_path_compile_s"] > 0.5  # a real sm_100a compile on the CPU: seconds
    assert f"a {variant['serving_path_compile_s']:.1f} s stall" in finding["message"]
    by_rank = {row["rank"]: row for row in tp2.report["ranks"]}
    assert by_rank[0]["serving_path_compiles"] == 1 and by_rank[0]["status"] == "serving-path compile"
    assert by_rank[1]["serving_path_compiles"] == 0 and by_rank[1]["status"] == "ok"
    assert "[pid " in tp2.stdout and "rank 0]" in tp2.stdout


def test_nothing_of_the_job_is_left_running(tp2):
    pids = [str(process["pid"]) for process in tp2.report["processes"]]
    alive = subprocess.run(["ps", "-o", "pid=", "-p", ",".join(pids)], capture_output=True, text=True).stdout.split()
    assert alive == []


def test_the_rank_that_waited_at_the_collective_shows_its_slow_step_beside_the_compile_it_waited_for(tp2):
    by_rank = {row["rank"]: row for row in tp2.report["ranks"]}
    [compiled] = by_rank[0]["pids"]
    [finding] = tp2.report["findings"]
    stall = next(
        v["serving_path_compile_s"]
        for f in tp2.report["families"]
        for v in f["variants"]
        if v["serving_path_compile_s"]
    )
    assert by_rank[1]["waited_for_pids"] == [compiled] and by_rank[1]["slowest_step_s"] >= 0.8 * stall
    assert by_rank[0]["waited_for_pids"] == []  # rank 0's slow step is its own compile
    [step] = next(t["steps"] for t in tp2.report["timeline"] if t["pid"] == by_rank[1]["pids"][0])
    assert step["function"] == STEP and step["serving"] and step["usual"] < 0.2 * step["seconds"]
    assert f"meanwhile rank 1 (pid {by_rank[1]['pids'][0]}) waited in a" in finding["message"]
    assert "waited for rank 0" in tp2.stdout
    html = tp2.html
    assert html.count('class="step"') == 2 and "slow step" in html
