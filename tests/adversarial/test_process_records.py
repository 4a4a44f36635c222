"""Records that cannot be lost in silence: a trace descriptor that the program closes or reuses, a full disk and a
file-size limit each leave a run that names what it lost (INCOMPLETE) or still holds the serving-path compile
(FAIL); the program's own files hold only its own data."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.adversarial.conftest import ROOT, SYNTHETIC, WARM, assert_not_pass, observe, program

CLOSE_ALL = """
import os
os.closerange(3, 65536)  # as daemonizing code does (python-daemon's DaemonContext)
files = [open(os.path.join({out!r}, f"own-{{i}}.log"), "w") for i in range(8)]
for file in files:
    file.write("program data\\n")
    file.flush()
k.dispatch(1, "bf16", True)  # a serving-path compile
for file in files[:-1]:
    file.write("more\\n")
    file.close()
files[-1].write("left open, flushed at exit\\n")  # the interpreter flushes it at its end
"""


def test_a_program_that_closes_every_descriptor_keeps_its_files_and_the_compile_is_not_lost(tmp_path):
    out = tmp_path / "own"
    out.mkdir()
    result = observe(tmp_path, sys.executable, program(tmp_path, WARM + CLOSE_ALL.format(out=str(out))))
    for index in range(8):
        text = (out / f"own-{index}.log").read_text()
        expected = "program data\n" + ("more\n" if index < 7 else "left open, flushed at exit\n")
        assert text == expected, f"own-{index}.log holds {text!r}"
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    assert_not_pass(result)
    if result.report["verdict"] == "fail":
        [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
        assert finding["key"] == {"dtype": "bf16", "causal": True}
