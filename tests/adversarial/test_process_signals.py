"""Real signals: a worker ended by SIGTERM or SIGHUP (default action) keeps its counts and still dies by that signal;
a program's own handler, or a signal it ignores, behaves exactly as without mlacheck."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.adversarial.conftest import ROOT, WARM, observe, program

WORKER = WARM + textwrap.dedent(
    """
    import os, signal, sys, time
    for _ in range(99):
        k.dispatch(1)
    {setup}
    print("ready", flush=True)
    time.sleep(30)
    print("slept on", flush=True)
    """
)
PARENT = textwrap.dedent(
    """
    import signal, subprocess, sys
    worker = subprocess.Popen([sys.executable, {worker!r}], stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline() == "ready\\n"
    worker.send_signal(signal.{signal})
    rest = worker.stdout.read()
    print("worker:", worker.wait(), rest.strip().replace("\\n", " | "), flush=True)
    """
)


def run_plain(tmp_path, parent: str) -> str:
    """The program without mlacheck: the parent's line about its worker."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLACHECK_RUN_DIR", None)
    done = subprocess.run([sys.executable, parent], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return next(line for line in done.stdout.splitlines() if line.startswith("worker:"))


def the_worker_line(result) -> str:
    return next(line for line in result.stdout.splitlines() if line.startswith("worker:"))


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_worker_ended_by_a_signal_keeps_its_counts_and_dies_by_it(tmp_path, signame):
    worker = program(tmp_path, WORKER.format(setup=""), "worker.py")
    parent = program(tmp_path, PARENT.format(worker=worker, signal=signame))
    result = observe(tmp_path, sys.executable, parent)
    assert the_worker_line(result) == run_plain(tmp_path, parent) == f"worker: -{getattr(signal, signame)} "
    [variant] = [v for family in result.report["families"] for v in family["variants"]]
    assert variant["dispatches"] == 100, variant  # all of them, not "at least 1"
    [process] = [p for p in result.report["processes"] if p["argv"] and p["argv"][0].endswith("worker.py")]
    assert process["exited"], process


HANDLED = """
def handler(signum, frame):
    print("handled", signum, flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, handler)
"""
IGNORED = """
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def wake(signum, frame):
    print("woken", flush=True)
    sys.exit(0)
signal.signal(signal.SIGALRM, wake)
signal.alarm(1)
"""


@pytest.mark.parametrize("setup", [HANDLED, IGNORED], ids=["its own handler", "ignored"])
def test_a_program_that_handles_the_signal_behaves_as_without_mlacheck(tmp_path, setup):
    worker = program(tmp_path, WORKER.format(setup=textwrap.indent(setup, "")), "worker.py")
    parent = program(tmp_path, PARENT.format(worker=worker, signal="SIGTERM"))
    result = observe(tmp_path, sys.executable, parent)
    plain = run_plain(tmp_path, parent)
    assert the_worker_line(result) == plain, result.stderr
    assert plain in ("worker: 3 handled 15", "worker: 0 woken")
