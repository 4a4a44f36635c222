"""What capture could not see is never "ok" or "unchanged" (code-review.md smells 2, 7 and 8): a dispatched variant
never seen entering the cache (an insert from C, `dict.__setitem__`), a fingerprint that cannot be computed (a key
function renamed away or without source), a fork whose dispatch functions were renamed: each run is INCOMPLETE,
naming what was not seen."""

import sys

from tests.adversarial.conftest import ROOT, assert_not_pass, assert_pass, observe, program

TOY = ROOT / "tests" / "fixtures" / "toy"
INSERT_FROM_C = """
import mlacheck
from tests.fixtures.toy import toyc
toyc.warmup()
mlacheck.serving_started()
toyc.forward(10)
toyc.forward({x})
"""


def test_the_control_passes(tmp_path):
    assert_pass(
        observe(tmp_path, sys.executable, program(tmp_path, INSERT_FROM_C.format(x=20)), rules=str(TOY / "toyc.toml"))
    )


def test_a_variant_that_entered_the_cache_unseen_is_incomplete_and_named(tmp_path):
    result = observe(
        tmp_path, sys.executable, program(tmp_path, INSERT_FROM_C.format(x=5000)), rules=str(TOY / "toyc.toml")
    )
    assert_not_pass(result, "incomplete")
    reasons = "\n".join(result.report["incomplete"])
    assert "block=128" in reasons and "never seen entering the cache" in reasons, reasons
    assert "entered the cache unseen" in reasons, reasons  # the flush found the insert it missed


def rule(tmp_path, **changes) -> str:
    """A folder of rules: toyattn's with some [family] lines changed, and toyc's as it is."""
    text = (TOY / "toyattn.toml").read_text()
    for line, new in changes.items():
        text = "\n".join(new if row.startswith(f"{line} =") else row for row in text.splitlines())
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "toyattn.toml").write_text(text + "\n")
    (folder / "toyc.toml").write_text((TOY / "toyc.toml").read_text())
    return str(folder)


TOYATTN = """
import mlacheck
from tests.fixtures.toy import toyattn as t
from tests.fixtures.toy import toyc
t.warmup()
toyc.warmup()
mlacheck.serving_started()
t.forward(1)
toyc.forward(1)
"""


def test_a_key_function_renamed_away_is_not_an_unchanged_fingerprint(tmp_path):
    rules = rule(tmp_path, key_functions='key_functions = ["forward", "_make_key"]')
    result = observe(tmp_path, sys.executable, program(tmp_path, TOYATTN), rules=rules)
    assert_not_pass(result, "incomplete")
    assert any("_make_key" in line for line in result.report["incomplete"]), result.report["incomplete"]


def test_a_key_function_without_source_is_not_an_unchanged_fingerprint(tmp_path):
    rules = rule(tmp_path, key_functions='key_functions = ["forward", "_block"]')  # _block is exec'd: no source
    result = observe(tmp_path, sys.executable, program(tmp_path, TOYATTN), rules=rules)
    assert_not_pass(result, "incomplete")
    assert any("_block" in line and "fingerprint" in line for line in result.report["incomplete"])


def test_the_control_with_both_families_passes(tmp_path):
    assert_pass(observe(tmp_path, sys.executable, program(tmp_path, TOYATTN), rules=rule(tmp_path)))


def test_a_fork_whose_dispatch_functions_were_renamed_is_incomplete(tmp_path):
    """No rule applies to toyattn's installed code (its version is outside every rule's), and the rule's dispatch
    function is not in it (the fork renamed it): nothing can count its calls. (toyc is watched and clean.)"""
    rules = rule(tmp_path, checked_versions='checked_versions = "==0.0.1"', dispatch='dispatch = ["forward_v1"]')
    result = observe(tmp_path, sys.executable, program(tmp_path, TOYATTN), rules=rules)
    assert_not_pass(result, "incomplete")
    assert any("forward_v1" in line for line in result.report["incomplete"]), result.report["incomplete"]
