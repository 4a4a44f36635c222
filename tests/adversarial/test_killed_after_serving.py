"""A worker killed (SIGKILL, as engines end their process trees) soon after it served a variant it had also dispatched
before serving start: its counts died with it (a checkpoint is only as fresh as its last flush), so the trace's first
serving dispatch of the variant is the one record of that traffic. It is never read as a repeat of the warm-up's
dispatch (the same phase as written, before the mark settles it): the variant was served, not dead warm-up (a false
MLA002 blames the user's warm-up; under --strict, a false FAIL)."""

import sys
import textwrap

from tests.adversarial.conftest import observe, program

WORKER = textwrap.dedent(
    """
    import time
    import mlacheck
    from tests.fixtures import synthetic_kernels as k
    k.warmup(dtypes=("fp8",), causal=(True,))
    k.dispatch(1)  # a warm-up dispatch, before the mark
    mlacheck.serving_started()
    for _ in range(100):
        k.dispatch(1)  # the warm variant served
    print("served", flush=True)
    time.sleep(60)
    """
)
PARENT = textwrap.dedent(
    """
    import signal, subprocess, sys
    worker = subprocess.Popen([sys.executable, {worker!r}], stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline() == "served\\n"
    worker.send_signal(signal.SIGKILL)
    print("worker:", worker.wait(), flush=True)
    """
)


def test_a_variant_served_by_a_worker_killed_before_its_counts_were_kept_is_served_not_dead_warmup(tmp_path):
    worker = program(tmp_path, WORKER, "worker.py")
    result = observe(tmp_path, sys.executable, program(tmp_path, PARENT.format(worker=worker)), options=("--strict",))
    assert "worker: -9" in result.stdout, result.stdout + result.stderr
    [variant] = [v for family in result.report["families"] for v in family["variants"]]
    assert variant["status"] != "dead warm-up" and variant["dispatches"] >= 1, variant
    assert [f["code"] for f in result.report["findings"]] == [], result.report["findings"]
    assert result.report["verdict"] == "pass" and result.code == 0, result.stdout + result.stderr
