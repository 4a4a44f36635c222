"""Ctrl-C during a real compile: exit 130 and the report of what ran, never a C++ abort.

A KeyboardInterrupt raised inside cute.compile's native code once aborted the process (`terminate called after
throwing an instance of 'nanobind::python_error'`, exit 134). The scenario holds SIGINT back to its next step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from mlacheck.scenario.interrupt import DeferredInterrupt
from tests.integration.cli import ROOT


@pytest.mark.compile
def test_sigint_during_a_real_compile_ends_with_130_and_the_partial_report(tmp_path):
    trace, report = tmp_path / "trace.jsonl", tmp_path / "report.json"
    env = {name: value for name, value in os.environ.items() if name != "CUTE_DSL_ARCH"}
    process = subprocess.Popen(
        [sys.executable, "-m", "mlacheck", "run", "--kernel", "prefill", "--json", str(report), "--trace", str(trace)],
        cwd=ROOT,
        env={**env, "COLUMNS": "120"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (trace.exists() and '"type":"compile"' in trace.read_text()):  # the first warm-up compile is done,
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    until = time.monotonic() + 1.5  # and the second is under way: Ctrl-C, again and again, into it
    while time.monotonic() < until and process.poll() is None:
        process.send_signal(signal.SIGINT)
        time.sleep(0.02)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "terminate called" not in stderr and "Traceback" not in stderr + stdout, stderr[-2000:]
    assert stdout.splitlines()[-1].endswith("exit 130: interrupted (Ctrl-C) during warm-up"), stdout[-500:]
    saved = json.loads(report.read_text())
    assert (saved["verdict"], saved["exit_code"], saved["interrupted"]) == ("incomplete", 130, "warm-up")
    assert saved["incomplete"][0] == "the run was interrupted (Ctrl-C) during warm-up: the rest was not run"
    [family] = saved["families"]
    assert sum(v["compile_s"] is not None for v in family["variants"]) >= 1  # what was compiled before is there


def test_sigint_is_held_back_to_the_next_check_and_the_handler_restored():
    before = signal.getsignal(signal.SIGINT)
    seen = []
    with DeferredInterrupt(lambda: seen.append("told")) as deferred:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs between bytecodes: nothing is raised here
        assert deferred.pending and seen == ["told"]
        with pytest.raises(KeyboardInterrupt):
            deferred.check()
    assert signal.getsignal(signal.SIGINT) is before
