"""The pure-Python hot path's generated wrapper with a dispatch parameter named `next` or `BaseException`
(redteam.md section 5): the program computes what it computes without mlacheck, and the run passes."""

import subprocess
import sys

import pytest

from tests.adversarial.conftest import ROOT, assert_pass, observe, program

RULES = str(ROOT / "tests" / "fixtures" / "toy" / "toynames.toml")
TEXT = """
from tests.fixtures.toy import toynames as t
t.warmup()
print("result:", t.forward(0), t.forward(0, next=1, BaseException=1), t.forward(0, 5, 6))
try:
    t.forward("x")
except TypeError:
    print("raised: TypeError")
"""


@pytest.mark.parametrize("hotpath", ["python", ""])
def test_a_parameter_named_next_or_baseexception_computes_the_same(tmp_path, hotpath):
    path = program(tmp_path, TEXT)
    alone = subprocess.run(
        [sys.executable, path], cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, capture_output=True, text=True, check=True
    )
    assert "result: 42 2 11" in alone.stdout and "raised: TypeError" in alone.stdout
    result = observe(tmp_path, sys.executable, path, rules=RULES, env={"MLACHECK_HOTPATH": hotpath})
    assert alone.stdout.strip() in result.stdout, result.stdout + result.stderr
    assert_pass(result)
