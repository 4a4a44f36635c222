"""Dispatch accounting is per thread (code-review.md smell 4, its appendix row 4): a dispatch call that returned
without its cache lookup, or died before it, is judged by what happened in its own thread. Another thread's lookup
made meanwhile must not count as its lookup. Both hot paths (the compiled one and MLACHECK_HOTPATH=python)."""

import sys
from pathlib import Path

import pytest

from tests.adversarial.conftest import ROOT, assert_not_pass, assert_pass, observe, program

TOY = str(ROOT / "tests" / "fixtures" / "toy" / "toyattn.toml")
HOTPATHS = {"compiled": "", "python": "python"}

HELD = """
import threading
import mlacheck
from tests.fixtures.toy import toyattn as t

t.warmup()
t.forward(1)
mlacheck.serving_started()
entered, release = threading.Event(), threading.Event()

def hold():
    entered.set()
    release.wait(30)

def held_call():
    try:
        t.forward({x}, hold=hold)
    except ValueError:
        pass

worker = threading.Thread(target=held_call)
worker.start()
entered.wait(30)
{meanwhile}
release.set()
worker.join()
t.forward(2)
"""


def run(tmp_path: Path, hotpath: str, x: str, meanwhile: str):
    text = HELD.format(x=x, meanwhile=meanwhile)
    return observe(
        tmp_path, sys.executable, program(tmp_path, text), rules=TOY, env={"MLACHECK_HOTPATH": HOTPATHS[hotpath]}
    )


@pytest.mark.parametrize("hotpath", HOTPATHS)
def test_the_control_with_two_threads_passes(tmp_path, hotpath):
    assert_pass(run(tmp_path, hotpath, "3", "t.forward(2)"))


@pytest.mark.parametrize("hotpath", HOTPATHS)
def test_a_call_without_a_lookup_is_incomplete_while_another_thread_looks_up(tmp_path, hotpath):
    result = run(tmp_path, hotpath, "0", "t.forward(2)")
    assert_not_pass(result, "incomplete")
    assert any("returned without looking the cache up" in line for line in result.report["incomplete"])


@pytest.mark.parametrize("hotpath", HOTPATHS)
def test_a_call_that_died_before_its_lookup_is_incomplete_while_another_thread_looks_up(tmp_path, hotpath):
    result = run(tmp_path, hotpath, "None", "t.forward(2)")
    assert_not_pass(result, "incomplete")
    assert any("raised before the cache lookup" in line for line in result.report["incomplete"])
