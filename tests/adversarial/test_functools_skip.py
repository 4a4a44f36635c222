"""No FAIL from a limit of the tool (code-review.md F1): under `--compile skip`, a functools entry cached before
mlacheck was installed (here by a typed cache filled at import, whose stored keys carry the arguments' types) is a
hit, never a serving-path compile; a variant that was not cached is still one."""

import sys

from tests.adversarial.conftest import ROOT, assert_not_pass, assert_pass, observe, program

RULES = str(ROOT / "tests" / "fixtures" / "toy" / "toytyped.toml")
TEXT = """
import mlacheck
from tests.fixtures.toy import toytyped as t
mlacheck.serving_started()
t.forward({x})
"""


def test_an_entry_cached_before_install_is_no_compile_under_compile_skip(tmp_path):
    result = observe(
        tmp_path, sys.executable, program(tmp_path, TEXT.format(x=1)), rules=RULES, options=("--compile", "skip")
    )
    assert_pass(result)


def test_a_variant_not_cached_is_still_a_serving_path_compile_under_compile_skip(tmp_path):
    result = observe(
        tmp_path, sys.executable, program(tmp_path, TEXT.format(x=5000)), rules=RULES, options=("--compile", "skip")
    )
    assert_not_pass(result, "fail")
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert finding["key"]["block"] == 128
