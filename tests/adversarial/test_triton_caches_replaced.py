"""What goes past the Triton capture's counting dicts: the program puts a dict of its own in place of a kernel's
`kernel_cache` (or rebinds the kernel's `device_caches`), or of an autotuner's `cache`, after the warm-up. The launches
and tunings through it are not counted or seen; the audit at each counts flush names it (an `unseen` event), so the
run cannot pass. Before the audit each attack below ended in PASS: a tuning on the serving path (every config
benchmarked, nothing new compiled) was never seen, and a warm-up variant served from the program's dict read as dead
warm-up, a warning."""

import os
import sys

import pytest

from tests.adversarial.conftest import ROOT, assert_not_pass, assert_pass, observe, program

OPTIONS = ("--dry", "--compile", "skip", "--arch", "sm_90a")
ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
KERNELS = """
import collections
import torch
import triton
import triton.language as tl
import mlacheck


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


x = torch.zeros(4096, dtype=torch.bfloat16)
y = torch.zeros(4096, dtype=torch.bfloat16)
scale[(1,)](x, y, 64, BLOCK=64)
tuned[(1,)](x, y, 4096)
mlacheck.serving_started()
ATTACK
scale[(1,)](x, y, 64, BLOCK=64)
tuned[(1,)](x, y, SERVED_N)
"""
ATTACKS = {
    "a kernel_cache replaced by a copy": (
        "[(device, entry)] = scale.device_caches.items()\nscale.device_caches[device] = (dict(entry[0]), *entry[1:])"
    ),
    "device_caches rebound": (
        "scale.device_caches = collections.defaultdict(\n"
        "    scale.device_caches.default_factory,\n"
        "    {device: (dict(entry[0]), *entry[1:]) for device, entry in scale.device_caches.items()},\n"
        ")"
    ),
    # tunings restored from a file, say: 4000 tunes anew on the serving path; its configs' variants (n: i32 %16)
    # are the warm-up's, so nothing compiles and only the tuning cache saw it
    "an autotuner's cache replaced": "tuned.cache = dict(tuned.cache)",
}


def run(tmp_path, attack: str, served_n: int):
    text = KERNELS.replace("ATTACK", attack).replace("SERVED_N", str(served_n))
    return observe(tmp_path, sys.executable, program(tmp_path, text), rules=None, options=OPTIONS, env=ENV)


def test_the_control_passes(tmp_path):
    assert_pass(run(tmp_path, "", 4096))


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_counting_dict_the_program_replaced_is_unseen_and_cannot_pass(tmp_path, attack):
    result = run(tmp_path, ATTACKS[attack], 4000 if "autotuner" in attack else 4096)
    assert_not_pass(result, "incomplete")
    reasons = "\n".join(result.report["incomplete"])
    assert "not mlacheck's counting dict" in reasons, reasons
    assert result.report["internal_errors"] == []
    if "autotuner" not in attack:  # the warm-up variant may have been served from the program's dict: not dead
        dead = [
            f for f in result.report["findings"] if f["code"] == "MLA002" and f["family"] == "triton:__main__.scale"
        ]
        assert not dead, dead
