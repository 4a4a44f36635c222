"""A process that execs into a new image is a new process to observe, or is named as unobserved: an exec into
`python -S`, into a Python without mlacheck with a clean environment, a fork then an exec, and an exec into the same
Python (whose new image writes into the same trace: the two images are told apart)."""

import os
import subprocess
import sys

import pytest

from tests.adversarial.conftest import ROOT, WARM, assert_not_pass, observe, program

SERVE_BF16 = "import sys; sys.path.insert(0, {root!r}); from tests.fixtures import synthetic_kernels as k; k.dispatch(1, 'bf16', True)"


def bare_python() -> str:
    """An interpreter that has no mlacheck installed (the one this venv is made from), else skip."""
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    probe = subprocess.run([base, "-c", "import mlacheck"], capture_output=True, cwd="/", env={"PATH": "/usr/bin"})
    if probe.returncode == 0:
        pytest.skip("the base interpreter has mlacheck installed too")
    return base


def exec_program(tmp_path, how: str) -> str:
    serve = SERVE_BF16.format(root=str(ROOT))
    if how == "python -S":
        call = f"os.execv(sys.executable, [sys.executable, '-S', '-c', {serve!r}])"
    else:
        env = {"PATH": os.environ["PATH"]}
        bare = bare_python()  # named by its path: a bare name would be looked up along PATH, finding the venv's
        call = f"os.execve({bare!r}, [{bare!r}, '-c', {serve!r}], {env!r})"
    body = WARM + "import os, sys\nfor _ in range(4):\n    k.dispatch(1)\n"
    if how.startswith("fork"):
        body += f"pid = os.fork()\nif pid == 0:\n    {call}\nos.waitpid(pid, 0)\n"
    else:
        body += call + "\n"
    return program(tmp_path, body)


@pytest.mark.parametrize("how", ["python -S", "a clean environment", "fork, then a clean environment"])
def test_an_exec_into_an_image_nothing_observes_is_named(tmp_path, how):
    result = observe(tmp_path, sys.executable, exec_program(tmp_path, how))
    assert_not_pass(result, "incomplete")
    assert any("exec" in reason and "wrote no trace" in reason for reason in result.report["incomplete"]), (
        result.report["incomplete"]
    )


def test_an_exec_into_the_same_python_is_a_new_image_told_apart_from_the_old(tmp_path):
    serve = SERVE_BF16.format(root=str(ROOT))
    text = (
        WARM
        + f"import os, sys\nfor _ in range(4):\n    k.dispatch(1)\nos.execv(sys.executable, [sys.executable, '-c', {serve!r}])\n"
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert_not_pass(result, "fail")
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert finding["key"] == {"dtype": "bf16", "causal": True}, finding
    variants = {v["key"]["dtype"]: v for family in result.report["families"] for v in family["variants"]}
    assert variants["fp8"]["dispatches"] == 5 and variants["fp8"]["precompiled"], variants["fp8"]
    assert variants["bf16"]["dispatches"] == 1 and not variants["bf16"]["precompiled"], variants["bf16"]
    assert result.report["incomplete"] == []
