"""A stale `[[triton.kernel]]` entry (its contract names a field that is no longer one of the kernel's parameters):
the contract cannot be checked, so the run is INCOMPLETE, as a stale rule family's is (code-review.md smell 11)."""

import os
import sys

from tests.adversarial.conftest import ROOT, assert_not_pass, assert_pass, observe, program

BUNDLED = ROOT / "mlacheck" / "rulefiles" / "bundled" / "triton.toml"
KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


x = torch.zeros(64, dtype=torch.bfloat16)
y = torch.zeros(64, dtype=torch.bfloat16)
scale[(1,)](x, y, 64, BLOCK=64)
import mlacheck
mlacheck.serving_started()
scale[(1,)](x, y, 64, BLOCK=64)
"""
ENTRY = '[[triton.kernel]]\nkernel = "__main__:scale"\n[[triton.kernel.contract]]\nfield = "{field}"\nequals = "*bf16 aligned16"\nwhy = "bf16 out"\n'


def run(tmp_path, field):
    rules = tmp_path / "triton.toml"
    rules.write_text(BUNDLED.read_text().split("[[triton.kernel]]")[0] + ENTRY.format(field=field))
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    options = ("--dry", "--compile", "skip", "--arch", "sm_90a")
    return observe(tmp_path, sys.executable, program(tmp_path, KERNEL), rules=str(rules), options=options, env=env)


def test_the_control_passes(tmp_path):
    assert_pass(run(tmp_path, "y_ptr"))


def test_a_contract_on_a_field_the_kernel_no_longer_has_is_incomplete(tmp_path):
    result = run(tmp_path, "out_ptr")
    assert_not_pass(result, "incomplete")
    assert any("out_ptr" in line for line in result.report["incomplete"]), result.report["incomplete"]
