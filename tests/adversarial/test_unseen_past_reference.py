"""A variant written past mlacheck, through a reference to the cache (or to the cached function) taken before it was
installed, by a worker that its parent then ends with SIGTERM (code-review.md smell 3's safety net): the check runs at
each counts flush, not only at a clean exit, so the run is INCOMPLETE, naming the variant."""

import sys

import pytest

from tests.adversarial.conftest import ROOT, assert_not_pass, observe, program

TOY = ROOT / "tests" / "fixtures" / "toy"
WORKER = """
import time
import mlacheck
from tests.fixtures.toy import toyref as t

t.warmup()
mlacheck.serving_started()
t.{path}_through_reference(5000)
until = time.monotonic() + 6  # past the 5 s counts flush
while time.monotonic() < until:
    t.{path}(1)
print("served", flush=True)
time.sleep(60)
"""
PARENT = """
import signal
import subprocess
import sys

worker = subprocess.Popen([sys.executable, {worker!r}], stdout=subprocess.PIPE, text=True)
assert worker.stdout.readline().strip() == "served"
worker.send_signal(signal.SIGTERM)
print("worker ended:", worker.wait())
"""


@pytest.mark.parametrize(("path", "rules"), [("forward", "toyref.toml"), ("decode", "toyref_functools.toml")])
def test_a_write_past_mlacheck_in_a_worker_ended_by_sigterm_is_incomplete(tmp_path, path, rules):
    worker = program(tmp_path, WORKER.format(path=path), "worker.py")
    result = observe(tmp_path, sys.executable, program(tmp_path, PARENT.format(worker=worker)), rules=str(TOY / rules))
    assert_not_pass(result, "incomplete")
    reasons = "\n".join(result.report["incomplete"])
    assert "reference" in reasons and "block=128" in reasons, reasons
