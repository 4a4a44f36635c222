"""A functools-cached family whose cached function is rebound, or whose module is reloaded or imported again
(redteam.md 1.17 on the functools kind): followed (MLA001 for the serving-path compile) or INCOMPLETE, never PASS."""

import sys

import pytest

from tests.adversarial.conftest import ROOT, assert_not_pass, observe, program

RULES = str(ROOT / "tests" / "fixtures" / "toy" / "toyfunc.toml")
ATTACKS = {
    "assign": "t._get_kernel = functools.cache(t._get_kernel.__wrapped__)",
    "reload": "importlib.reload(t)",
    "reimport": "del sys.modules['tests.fixtures.toy.toyfunc']\nimport tests.fixtures.toy.toyfunc as t",
}
TEXT = """
import functools
import importlib
import sys
import mlacheck
import tests.fixtures.toy.toyfunc as t
t.COMPILE_SECONDS = 0
t.forward(1)
mlacheck.serving_started()
{attack}
t.forward(5000)
"""


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_rebound_reloaded_or_reimported_functools_cache_never_passes(tmp_path, attack):
    result = observe(tmp_path, sys.executable, program(tmp_path, TEXT.format(attack=ATTACKS[attack])), rules=RULES)
    if attack == "assign":
        assert_not_pass(result, "incomplete")
        assert any("_get_kernel no longer holds mlacheck's" in line for line in result.report["incomplete"])
    else:
        assert_not_pass(result, "fail")
        assert any(f["code"] == "MLA001" and f["key"]["block"] == 128 for f in result.report["findings"])
