"""A watched cache rebound, its module reloaded or imported again (redteam.md 1.17): the program's serving-path
compile then goes into a cache, or through a dispatch function, that capture did not put there. The run must
follow it (the compile is a FAIL) or say it could not (INCOMPLETE); never PASS. Also where the rule says every call
looks up. A module that ran again (reload, re-import) is followed: its serving-path compile is MLA001, and clean
traffic through it passes; a cache the program rebinds itself is named, INCOMPLETE."""

import sys

import pytest

from tests.adversarial.conftest import ROOT, assert_not_pass, assert_pass, observe, program

TOY = ROOT / "tests" / "fixtures" / "toy" / "toyattn.toml"
ATTACKS = {
    "none": "",
    "assign": "t._kernels = {}",
    "reload": "importlib.reload(t)",
    "reimport": "del sys.modules['tests.fixtures.toy.toyattn']\nimport tests.fixtures.toy.toyattn as t",
}
TEXT = """
import importlib
import sys
import mlacheck
import tests.fixtures.toy.toyattn as t
t.warmup()
t.forward(1)
mlacheck.serving_started()
{attack}
t.warmup()
t.forward(1)
t.forward(5000)
"""


def rules(tmp_path, every_call_looks_up: bool) -> str:
    path = tmp_path / "toyattn.toml"
    path.write_text(
        TOY.read_text().replace(
            "every_call_looks_up = true", f"every_call_looks_up = {str(every_call_looks_up).lower()}"
        )
    )
    return str(path)


@pytest.mark.parametrize("every_call_looks_up", [True, False])
def test_the_control_passes(tmp_path, every_call_looks_up):
    text = TEXT.format(attack="").replace("t.forward(5000)\n", "")
    assert_pass(observe(tmp_path, sys.executable, program(tmp_path, text), rules=rules(tmp_path, every_call_looks_up)))


@pytest.mark.parametrize("every_call_looks_up", [True, False])
@pytest.mark.parametrize("attack", ["assign", "reload", "reimport"])
def test_a_rebound_reloaded_or_reimported_cache_never_passes(tmp_path, attack, every_call_looks_up):
    text = TEXT.format(attack=ATTACKS[attack])
    result = observe(tmp_path, sys.executable, program(tmp_path, text), rules=rules(tmp_path, every_call_looks_up))
    if attack == "assign":
        assert_not_pass(result, "incomplete")
        assert any("_kernels no longer holds mlacheck's recording dict" in line for line in result.report["incomplete"])
    else:  # followed: the serving-path compile through the module that ran again is seen
        assert_not_pass(result, "fail")
        assert any(f["code"] == "MLA001" and f["key"]["block"] == 128 for f in result.report["findings"])
        assert result.report["incomplete"] == []


CLEAN = """
import importlib
import sys
import mlacheck
import tests.fixtures.toy.toyattn as t
t.warmup()
t.forward(1)
{attack}
t.warmup()
mlacheck.serving_started()
t.forward(1)
t.forward(2, causal=False)
"""
"""The module runs again and is warmed again before serving starts (a warm-up after the mark is serving-path
compiles: `capture.phase`), then serves only what was warmed."""


@pytest.mark.parametrize("attack", ["reload", "reimport"])
def test_clean_traffic_through_a_module_that_ran_again_passes(tmp_path, attack):
    text = CLEAN.format(attack=ATTACKS[attack])
    assert_pass(observe(tmp_path, sys.executable, program(tmp_path, text), rules=rules(tmp_path, True)))
