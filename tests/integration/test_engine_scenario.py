"""The scenario installs capture as program mode does, so a rule that does not describe the installed kernel library
is never applied to it, and reads its rules once a run. Real tokenspeed_mla dispatch on the CPU (--compile skip)."""

import os
from pathlib import Path

import pytest

import mlacheck.rulefiles.loading
from mlacheck.rulefiles import BUNDLED
from mlacheck.scenario.parts import run_scenario
from mlacheck.scenario.setup import CheckOptions
from tests.integration.cli import run_cli


@pytest.fixture(autouse=True)
def environment_kept():
    """An in-process run sets its target's variables (CUTE_DSL_ARCH): later tests' subprocesses do not inherit them."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_a_release_no_rule_describes_is_one_line_and_never_checked_with_that_rule(tmp_path):
    """Before, the scenario built its tokenspeed_mla captures by hand and applied the rule to whatever was installed;
    now the layout check decides, as in program mode: a rule checked against another release watches nothing, and a
    run that cannot watch the kernel it drives says so in one line instead of reporting on it."""
    rules = tmp_path / "rules"
    rules.mkdir()
    text = (BUNDLED / "tokenspeed_mla_prefill.toml").read_text()
    lines = [line for line in text.splitlines() if not line.startswith(("checked_versions", "fingerprint"))]
    at = lines.index('distribution = "tokenspeed-mla"') + 1
    (rules / "prefill.toml").write_text("\n".join([*lines[:at], 'checked_versions = "==9.9.9"', *lines[at:]]) + "\n")
    (rules / "engines.toml").write_text((BUNDLED / "engines.toml").read_text())
    result = run_cli("run", "--kernel", "prefill", "--compile", "skip", "--rules", str(rules), tmp_path=tmp_path)
    shown = result.stdout + result.stderr
    assert result.code == 2 and "Traceback" not in shown, shown
    [line] = result.stderr.splitlines()
    assert line.startswith("mlacheck: error: the scenario drives tokenspeed_mla.mla_prefill, but no rule file")
    assert "tokenspeed_mla.prefill was checked against tokenspeed-mla ==9.9.9" in line
    assert "installed: tokenspeed-mla " in line and "mlacheck rules --fingerprints" in line
    assert result.report is None  # no verdict on a kernel nothing watched


def test_a_scenario_run_reads_its_rules_once(monkeypatch):
    read: list[Path] = []
    load_rule_file = mlacheck.rulefiles.loading.load_rule_file  # where load_rules finds it (rulefiles/loading.py)
    monkeypatch.setattr(
        mlacheck.rulefiles.loading, "load_rule_file", lambda file: read.append(file) or load_rule_file(file)
    )
    report = run_scenario(CheckOptions(kernel="decode", compile="skip", batch_sizes="1,3"))
    assert report.verdict == "pass" and [f.name for f in report.families] == ["tokenspeed_mla.decode"]
    assert read and len(read) == len(set(read)), sorted(str(file) for file in read)
