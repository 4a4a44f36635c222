"""A `pytest --mlacheck` session that is killed leaves no process of its tests running: its watcher, which outlives
it, ends them (a detached child in a session of its own included). (`mlacheck run` killed: see
test_outputs_say_incomplete.py.)"""

import os
import signal
import subprocess
import sys
import time

from tests.adversarial.conftest import ROOT, SYNTHETIC
from tests.processes import alive

A_TEST = """
import os, subprocess, sys, time

def test_that_starts_a_detached_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    open({pids!r}, "w").write(str(child.pid))
    time.sleep(60)
"""


def test_a_killed_pytest_session_leaves_no_process_of_its_tests(tmp_path):
    pids = tmp_path / "pids"
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_it.py").write_text(A_TEST.format(pids=str(pids)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLACHECK_RUN_DIR", None)
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--mlacheck", "--mlacheck-rules", SYNTHETIC]
        + ["--mlacheck-run-dir", str(tmp_path / "run"), str(tmp_path / "suite")],
        cwd=tmp_path / "suite",
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not pids.exists():
        assert time.monotonic() < deadline and session.poll() is None
        time.sleep(0.05)
    time.sleep(0.5)  # the watcher has recorded the child
    child = int(pids.read_text())
    session.send_signal(signal.SIGKILL)
    session.wait()
    time.sleep(3)
    left = alive(child)
    if left:
        os.kill(child, signal.SIGKILL)
    assert not left, "the detached child of a test ran on after its pytest session was killed"
