"""[tool.mlacheck] in pyproject.toml, and --select / --ignore in the one place the verdict is decided."""

from __future__ import annotations

import copy

import pytest

from mlacheck.config import load_config
from mlacheck.errors import MlacheckError
from mlacheck.report.common import is_new
from mlacheck.report.github import to_github
from mlacheck.report.model import decide, read_report
from mlacheck.report.policy import ReportPolicy
from mlacheck.report.sarif import to_sarif
from tests.unit.test_formats import hand_made


def test_the_nearest_pyproject_is_read_and_its_paths_are_its_own(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.mlacheck]\nprofile = 'sglang'\nrules = 'rules'\nbaseline = 'ci/base.json'\nstrict = true\n"
        "output = ['sarif:out/m.sarif', 'github:-']\ncontext = {kv_cache_dtype = 'bfloat16', d_qk = 192}\n"
        "select = ['MLA001']\nignore = ['MLA002']\n"
    )
    inner = tmp_path / "src" / "pkg"
    inner.mkdir(parents=True)
    config, source = load_config(inner)
    assert source == tmp_path / "pyproject.toml"
    assert (config.profile, config.strict, config.select, config.ignore) == ("sglang", True, ["MLA001"], ["MLA002"])
    assert config.rules == tmp_path / "rules" and config.baseline == tmp_path / "ci" / "base.json"
    assert config.output == [f"sarif:{tmp_path / 'out' / 'm.sarif'}", "github:-"]
    assert config.context == {"kv_cache_dtype": "bfloat16", "d_qk": "192"}


@pytest.mark.parametrize("pyproject", [None, "[project]\nname = 'x'\n"])
def test_settings_without_a_table_build_no_model(tmp_path, pyproject):
    """Without a [tool.mlacheck] table (no pyproject.toml, or one without it), the settings are the front end's alone,
    read without building the table's pydantic model (issue 29: before an observed program starts)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    code = (
        "import json; from mlacheck import config; "
        "s = config.Settings('cli', {'strict': True}).read(); "
        "print(json.dumps([s.project, str(s.pyproject), len(config._MODEL)]))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(root)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    where = str(tmp_path / "pyproject.toml") if pyproject is not None else "None"
    assert json.loads(done.stdout) == [{}, where, 0]


def test_no_pyproject_or_no_table_is_no_setting(tmp_path):
    assert load_config(tmp_path)[0].model_dump() == load_config(tmp_path)[0].__class__().model_dump()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    config, source = load_config(tmp_path)
    assert source == tmp_path / "pyproject.toml" and config.profile is None and config.context == {}


@pytest.mark.parametrize(
    "table, needle",
    [
        ("colour = 'red'", "colour: Extra inputs are not permitted"),
        ("strict = 'yes please'", "strict:"),
        ("output = 'json:r.json'", "output:"),
        ("context = 3", "context:"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_file_and_the_key(tmp_path, table, needle):
    (tmp_path / "pyproject.toml").write_text(f"[tool.mlacheck]\n{table}\n")
    with pytest.raises(MlacheckError) as caught:
        load_config(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'pyproject.toml'}: [tool.mlacheck] ") and needle in message
    assert "\n" not in message


def test_broken_toml_is_one_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.mlacheck\n")
    with pytest.raises(MlacheckError, match="pyproject.toml: cannot read it"):
        load_config(tmp_path)


def decided(policy: ReportPolicy) -> dict:
    return decide(read_report(copy.deepcopy(hand_made())), policy).model_dump(mode="json")


def test_an_ignored_code_is_listed_as_ignored_and_never_fails():
    base = decided(ReportPolicy())
    assert (base["verdict"], base["counts"]["errors"], base["counts"]["warnings"]) == ("fail", 2, 1)
    ignored = decided(ReportPolicy.of(ignore=["MLA001,MLA004"]))
    assert ignored["verdict"] == "pass" and ignored["exit_code"] == 0, ignored["exit_reason"]
    assert ignored["counts"] == {"errors": 0, "warnings": 1, "baselined": 0, "ignored": 2}
    assert [f["ignored"] for f in ignored["findings"]] == [True, True, False]
    assert ignored["ignore"] == ["MLA001", "MLA004"] and ignored["select"] is None
    assert len(ignored["findings"]) == 3  # listed, not dropped
    assert not any(is_new(f) for f in ignored["findings"][:2])
    results = to_sarif(ignored)["runs"][0]["results"]
    assert [bool(r.get("suppressions")) for r in results] == [True, True, False]
    assert to_github(ignored).count("::error") == 0


def test_select_keeps_only_its_codes_and_strict_still_applies_to_them():
    selected = decided(ReportPolicy.of(select=["mla002"]))
    assert [f["ignored"] for f in selected["findings"]] == [True, True, False] and selected["verdict"] == "pass"
    strict = decided(ReportPolicy.of(strict=True, select=["MLA002"]))
    assert strict["verdict"] == "fail" and strict["counts"]["warnings"] == 1


def test_an_unknown_code_is_one_line():
    with pytest.raises(MlacheckError, match=r"^--ignore MLA777: no such finding code; choose from MLA001, "):
        ReportPolicy.of(ignore=["MLA001", "MLA777"])
