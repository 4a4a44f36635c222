"""A scenario run in parts (scenario/parts.py): on a device that runs some driven families' kernels and not others,
those execute and the others are traced for their own target in a spawned process. The device is the one thing
faked here (its compute capability); the parts run the real scenario, the traced one in a real child process."""

import os
from dataclasses import replace

import pytest

from mlacheck.errors import MlacheckError
from mlacheck.report.policy import ReportPolicy
from mlacheck.rulefiles import BUNDLED
from mlacheck.scenario import parts
from mlacheck.scenario.check import run_check
from mlacheck.scenario.setup import CheckOptions, prepare

VLLM = CheckOptions(profile="vllm", compile="skip", requests=4)


@pytest.fixture(autouse=True)
def environment_kept():
    """A scenario run sets its target's variables (CUTE_DSL_ARCH, FLASH_ATTENTION_NUM_SMS) in its process: this
    one's go back as they were, so that later tests' subprocesses do not inherit them."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def groups_of(options):
    setup = prepare(options)
    return setup.kinds, setup.groups


def test_an_h200_executes_fa4_and_traces_tokenspeed_mla_decode_for_sm_100a():
    kinds, groups = groups_of(VLLM)
    assert kinds == ("prefill", "decode")
    assert parts.split(kinds, groups, "auto", (9, 0)) == (("prefill",), ("decode",), "sm_100a")


@pytest.mark.parametrize(
    ("requested", "device"),
    [("auto", None), ("auto", (10, 0)), ("sm_100a", (9, 0)), ("auto", (7, 5))],
    ids=["no device", "a B200 runs both", "a target asked for", "a T4 runs neither"],
)
def test_one_mode_serves_the_run(requested, device):
    kinds, groups = groups_of(VLLM)
    assert parts.split(kinds, groups, requested, device) is None


def test_the_traced_part_runs_in_a_process_of_its_own_and_the_parts_make_one_report():
    traced = parts.traced_part(VLLM, ("decode",), "sm_100a")  # a spawned child (dry on this CPU)
    assert [f.name for f in traced.families] == ["tokenspeed_mla.decode"] and traced.target_arch == "sm_100a"
    executed = run_check(replace(VLLM, kernel="prefill"))
    report = parts.joined(executed, traced, ReportPolicy())
    assert report.mode == "mixed" and report.scenario["kernels"] == ["prefill", "decode"]
    modes = {family.name: (family.mode, family.target_arch) for family in report.families}
    assert modes["tokenspeed_mla.decode"] == ("dry", "sm_100a") and modes["flash_attn_4.fwd"] == ("dry", "sm_100a")
    assert len(report.findings) == len(executed.findings) + len(traced.findings)
    assert report.verdict == "fail" and report.counts.errors == executed.counts.errors + traced.counts.errors
    header = {row[0]: row[1] for row in report.scenario["header"]}
    assert header["modes"].startswith("dry on sm_100a: flash_attn_4.fwd") and "tokenspeed_mla.decode" in header["modes"]
    assert {"decode traffic", "prefill traffic", "sm count"} <= set(header)
    assert header["launches"] == f"{executed.scenario['launches']} launched, {traced.scenario['launches']} replaced"
    hidden = executed.scenario["library_warnings"] + traced.scenario["library_warnings"]
    assert report.scenario.get("library_warnings", 0) == hidden and ("library warnings" in header) == bool(hidden)


def test_a_traced_part_that_fails_is_one_line_here():
    only_fa4 = replace(VLLM, rules=BUNDLED / "flash_attn_4.toml")  # it declares no decode family
    with pytest.raises(MlacheckError, match=r"^the traced part \(decode for sm_100a\): .*no rule file declares it"):
        parts.traced_part(only_fa4, ("decode",), "sm_100a")
