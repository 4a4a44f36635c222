"""Errors with the right advice (issue 31): each is one line, exit 2, naming the setting as the user wrote it (the
flag, or the pyproject.toml key), found before anything runs where it can be, and leaving nothing behind."""

from __future__ import annotations

import importlib.util

import pytest

from tests.integration.cli import ROOT, run_cli


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.code == 2 and len(lines) == 1, result.stdout[-1500:] + result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def project(tmp_path, table: str):
    (tmp_path / "pyproject.toml").write_text(f"[tool.mlacheck]\n{table}")
    return tmp_path


@pytest.mark.parametrize(
    "table, words",
    [
        ('strict = "yes"\n', "[tool.mlacheck] strict: Input should be a valid boolean"),
        ("output = ['xml:x.xml']\n", "[tool.mlacheck] output xml:{folder}/x.xml: unknown format 'xml'"),
        ("baseline = 'nope.json'\n", "[tool.mlacheck] baseline = '{folder}/nope.json': cannot read it"),
        ("rules = 'nope'\n", "[tool.mlacheck] rules = '{folder}/nope': no such rule file or folder"),
        ("ignore = ['MLA999']\n", "[tool.mlacheck] ignore MLA999: no such finding code"),
    ],
)
def test_a_pyproject_value_is_named_as_its_key_not_as_a_flag(tmp_path, table, words):
    folder = project(tmp_path, table)
    line = one_line(run_cli("report", str(ROOT / "tests" / "gold" / "incomplete.json"), cwd=folder))
    assert words.format(folder=folder) in line and " --" not in line.split(":", 2)[1], line


@pytest.mark.parametrize(
    "args, words",
    [
        (("--json", ""), "mlacheck: error: --json: give a file path (it was given empty)"),
        (("--num-sms", "100000"), "mlacheck: error: --num-sms 100000: more SMs than any GPU has"),
        (("--output", "sarif:/proc/x.sarif"), "mlacheck: error: --output sarif:/proc/x.sarif: cannot write it"),
        (("--trace", "/proc/x.jsonl"), "mlacheck: error: --trace /proc/x.jsonl: cannot write it"),
        (("--select", ""), "mlacheck: error: --select selects no finding code"),
    ],
)
def test_a_bad_option_is_refused_before_the_run(args, words):
    result = run_cli("run", "--compile", "skip", *args)
    assert one_line(result).startswith(words) and "mlacheck report" not in result.stdout  # nothing ran


def test_a_failed_start_leaves_no_run_folder(tmp_path):
    named = one_line(run_cli("run", "--run-dir", str(tmp_path / "run"), "--", "no_such_command_xyz", cwd=tmp_path))
    assert named.startswith("mlacheck: error: cannot start 'no_such_command_xyz': not found on PATH")
    one_line(run_cli("run", "--", str(tmp_path / "missing.sh"), cwd=tmp_path))
    assert list(tmp_path.iterdir()) == []  # before: mlacheck-runs/<time>-<pid>/ with capture.json and rules/


def test_env_refuses_a_file_as_the_run_folder(tmp_path):
    (tmp_path / "afile").write_text("")
    line = one_line(run_cli("env", "--run-dir", "afile", cwd=tmp_path))  # before: exit 0, and advice that refuses it
    assert line.startswith("mlacheck: error: --run-dir afile: is a file")


@pytest.mark.skipif(importlib.util.find_spec("tokenspeed_mla") is None, reason="needs tokenspeed_mla")
def test_a_rule_with_a_wrong_module_does_not_say_install_what_is_installed(tmp_path):
    bundled = ROOT / "mlacheck" / "rulefiles" / "bundled" / "tokenspeed_mla_prefill.toml"
    text = bundled.read_text().replace('module = "tokenspeed_mla.mla_prefill"', 'module = "no_such_module_xyz"')
    assert 'module = "no_such_module_xyz"' in text
    (tmp_path / "bad.toml").write_text(text)
    line = one_line(run_cli("run", "--compile", "skip", "--kernel", "prefill", "--rules", str(tmp_path / "bad.toml")))
    assert "is installed: check the rule file's module" in line and "; install tokenspeed-mla" not in line


@pytest.mark.skipif(importlib.util.find_spec("tokenspeed_mla") is None, reason="needs tokenspeed_mla")
def test_a_warmup_the_run_never_called_is_an_error_after_the_report():
    result = run_cli(
        "run", "--compile", "skip", "--kernel", "decode", "--warmup", "tests/fixtures/sglang_warmup.py:bf16_warmup"
    )  # before: PASS, exit 0, and no word that the warm-up was never used
    line = one_line(result)
    assert line.startswith("mlacheck: error: --warmup tests/fixtures/sglang_warmup.py:bf16_warmup: never called")
    assert "verdict: PASS" in result.stdout  # the report of what did run is still printed


def test_help_shows_no_python_types_or_braces():
    for command in ("run", "report", "manifest", "rule"):
        text = run_cli(command, "--help").stdout
        assert "<list[" not in text and "{" not in text and "<str>" not in text, text
    assert "mlacheck report [OPTIONS] SOURCE...\n" in run_cli("report", "--help").stdout
