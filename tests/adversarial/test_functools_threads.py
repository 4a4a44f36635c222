"""functools compiles are attributed per call (code-review.md smell 3, its appendix row 3): a worker whose warm-up
thread (under a [[phase]] frame) and serving thread compile at once must show both compiles, the serving one as
MLA001; whether the worker exits or its parent ends it with SIGTERM (the compile is evidence once it is made, not
at exit)."""

import sys

import pytest

from tests.adversarial.conftest import ROOT, assert_not_pass, observe, program

RULES = str(ROOT / "tests" / "fixtures" / "toy" / "toyfunc.toml")
WORKER = """
import sys
import threading
import time
from tests.fixtures.toy import toyfunc as t


def warm():
    t.forward(1)


def serve():
    time.sleep(0.1)  # while the warm-up compiles
    t.forward(5000)


threads = [threading.Thread(target=warm), threading.Thread(target=serve)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("served", flush=True)
if "--linger" in sys.argv:
    time.sleep(60)
"""
PARENT = """
import signal
import subprocess
import sys

worker = subprocess.Popen([sys.executable, {worker!r}] + sys.argv[1:], stdout=subprocess.PIPE, text=True)
assert worker.stdout.readline().strip() == "served"
if "--linger" in sys.argv:
    worker.send_signal(signal.SIGTERM)
print("worker ended:", worker.wait())
"""


@pytest.mark.parametrize("ending", ["exit", "sigterm"])
def test_concurrent_warm_up_and_serving_compiles_are_both_seen(tmp_path, ending):
    worker = program(tmp_path, WORKER, "worker.py")
    args = ["--linger"] if ending == "sigterm" else []
    result = observe(tmp_path, sys.executable, program(tmp_path, PARENT.format(worker=worker)), *args, rules=RULES)
    assert_not_pass(result, "fail")
    [family] = [f for f in result.report["families"] if f["name"] == "toyfunc.forward"]
    statuses = {v["key"]["block"]: v["status"] for v in family["variants"]}
    assert statuses == {64: "dead warm-up", 128: "serving-path compile"}, statuses
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert finding["key"]["block"] == 128
