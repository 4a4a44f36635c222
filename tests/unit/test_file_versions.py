"""Every file mlacheck reads back carries a format version, and one reader check (`mlacheck.schemas.check`) refuses,
in one line that says what changed, a file of a format it cannot read: a rule file of mlacheck 0.2.0, a newer rule
file, trace or baseline."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlacheck import schemas
from mlacheck.errors import MlacheckError
from mlacheck.report.baseline import load_baseline
from mlacheck.rulefiles import BUNDLED, load_rule_file

ROOT = Path(__file__).resolve().parents[2]

RULE_OF_0_2_0 = """
[family]
name = "tokenspeed_mla.prefill"
distribution = "tokenspeed-mla"
checked_versions = [">=2.0.3,<2.1", "==0.2.16"]
module = "tokenspeed_mla.mla_prefill"
cache = "_compiled_kernels"
lookup = "getitem"
compile = "_compile_prefill_kernel"
dispatch = ["tokenspeed_mla_prefill"]
key_fields = ["q_dtype", "d_qk", "d_v", "is_causal", "return_lse", "enable_pdl", "enable_ex2_emulation"]
"""
"""tokenspeed_mla_prefill.toml as mlacheck 0.2.0 shipped it (rules/ at 03148eb), cut to its [family] table."""


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_a_rule_file_of_0_2_0_is_refused_in_one_line_that_says_what_changed(tmp_path):
    path = tmp_path / "prefill.toml"
    path.write_text(RULE_OF_0_2_0)
    with pytest.raises(MlacheckError) as excinfo:
        load_rule_file(path)
    message = one_line(excinfo)
    assert message.startswith(f"{path}: a rule file of format 1 (mlacheck 0.2.0)")
    assert "family.arches is required" in message and "format_version = 2" in message


def test_the_same_file_updated_as_told_loads(tmp_path):
    path = tmp_path / "prefill.toml"
    path.write_text("format_version = 2\n" + RULE_OF_0_2_0.replace("[family]\n", '[family]\narches = ["sm_100a"]\n'))
    assert load_rule_file(path).family.arches == ["sm_100a"]


def test_a_rule_file_of_a_newer_format_says_to_upgrade(tmp_path):
    path = tmp_path / "future.toml"
    path.write_text("format_version = 3\n" + RULE_OF_0_2_0)
    with pytest.raises(MlacheckError, match="newer than this mlacheck reads .*upgrade mlacheck"):
        load_rule_file(path)


def test_an_ordinary_mistake_is_not_blamed_on_the_format(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[family]\nname = 'x'\n")
    with pytest.raises(MlacheckError, match="family.distribution: Field required"):
        load_rule_file(path)


def test_every_bundled_rule_file_declares_the_current_format():
    for path in BUNDLED.glob("*.toml"):
        assert f"format_version = {schemas.FORMATS['rule file'].current}" in path.read_text(), path


def test_a_baseline_of_a_newer_format_is_refused(tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"format_version": 2, "fingerprints": []}))
    with pytest.raises(MlacheckError) as excinfo:
        load_baseline(path)
    assert "a baseline of format 2, newer than this mlacheck reads" in one_line(excinfo)
    path.write_text(json.dumps({"format_version": 1, "fingerprints": []}))
    assert load_baseline(path)["fingerprints"] == []


def test_the_cli_refuses_an_old_rule_file_with_exit_2_and_no_traceback(tmp_path):
    path = tmp_path / "prefill.toml"
    path.write_text(RULE_OF_0_2_0)
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "rules", "--rules", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "format 1 (mlacheck 0.2.0)" in done.stderr + done.stdout


def test_every_format_names_what_changed_in_each_version_it_writes():
    for kind in schemas.FORMATS.values():
        assert kind.current in kind.changes and kind.current in kind.readable, kind.name
