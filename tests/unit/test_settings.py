"""The settings table (mlacheck/config.py): every setting a front end takes reaches the library, an error names a
setting where the user wrote it (the flag, the pytest option or the pyproject key), and library code names settings
only through the table, never by a flag of one front end."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mlacheck.config import POLICY, PROGRAM, SCENARIO, SETTINGS, Settings
from mlacheck.errors import SETTING, MlacheckError, about
from mlacheck.report.policy import ReportPolicy

ROOT = Path(__file__).resolve().parents[2]
FRONT_ENDS = ("cli.py", "pytest_plugin.py")
OWN_FLAGS = {("manifest.py", "--output")}  # `mlacheck manifest -o PATH`: the command's own option, not the setting
DISPLAY = ("quiet", "verbose")  # how the CLI prints, not what it checks
DOCUMENTS = ("output", "json")  # Settings.outputs
CHECKED = ("context",)  # Settings.context: ProgramOptions' and CheckOptions' context


def project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(f"[tool.mlacheck]\n{table}\n")
    return tmp_path


def test_every_setting_reaches_the_library():
    """A setting a front end takes but no option object reads would be silently dropped: a `strict` that does
    nothing passes a run that should fail."""
    read = {*PROGRAM, *POLICY, *SCENARIO, *DOCUMENTS, *CHECKED, *DISPLAY, "cuda_graph"}
    assert set(SETTINGS) <= read, set(SETTINGS) - read
    pytest_settings = {name for name, setting in SETTINGS.items() if setting.pytest}
    assert pytest_settings <= {*PROGRAM, *POLICY, *DOCUMENTS, *CHECKED}, pytest_settings


def test_every_value_given_reaches_the_option_objects(tmp_path):
    given = {
        "run_dir": "run",
        "rules": str(tmp_path),
        "compile": "skip",
        "dry": True,
        "arch": "sm_90a",
        "num_sms": 132,
        "serving_start": ["engine:serve"],
        "step": ["engine:Runner.step"],
        "context": ["kv_cache_dtype=bfloat16"],
        "strict": True,
        "allow_incomplete": True,
        "select": ["MLA001"],
        "ignore": ["MLA002"],
        "output": ["sarif:r.sarif"],
        "json": "r.json",
    }
    settings = Settings("pytest", given).read(tmp_path)
    assert settings.program() == {
        "run_dir": Path("run"),
        "rules": tmp_path,
        "compile": "skip",
        "dry": True,
        "arch": "sm_90a",
        "num_sms": 132,
        "serving_start": ("engine:serve",),
        "step": ("engine:Runner.step",),
        "context": {"kv_cache_dtype": "bfloat16"},
    }
    policy = ReportPolicy.of(**settings.policy())
    assert (policy.strict, policy.allow_incomplete) == (True, True)
    assert (policy.select, policy.ignore) == (frozenset({"MLA001"}), frozenset({"MLA002"}))
    assert settings.outputs() == [("sarif:r.sarif", "output", "sarif:r.sarif"), ("json:r.json", "json", "r.json")]


def test_the_front_end_overrides_the_file_lists_replace_and_context_merges(tmp_path):
    folder = project(tmp_path, "strict = true\nignore = ['MLA001']\ncontext = {a = '1', b = '2'}\nkernel = 'decode'")
    from_file = Settings("cli", {}).read(folder)
    assert (from_file["strict"], from_file["ignore"], from_file["kernel"]) == (True, ["MLA001"], "decode")
    given = Settings("cli", {"strict": False, "ignore": ["MLA002"], "context": ["b=3", "c=4"]}).read(folder)
    assert (given["strict"], given["ignore"]) == (False, ["MLA002"])
    assert given.context() == {"a": "1", "b": "3", "c": "4"}
    assert Settings("cli", {}).read(tmp_path / "..")["kernel"] == "all"  # no file above: the default


@pytest.mark.parametrize(
    "front, given, written",
    [
        ("cli", {"run_dir": "x"}, "--run-dir x: is a file"),
        ("pytest", {"run_dir": "x"}, "--mlacheck-run-dir=x: is a file"),
        ("cli", {"json": "r.json"}, "--json r.json: is a file"),
    ],
)
def test_an_error_names_the_setting_as_the_front_end_writes_it(front, given, written):
    name, value = next(iter(given.items()))
    error = MlacheckError(f"{SETTING}: is a file", name, value)
    assert Settings(front, given).line(error) == written


def test_an_error_names_a_setting_from_the_file_by_its_key(tmp_path):
    folder = project(tmp_path, "rules = 'ci/rules'\nselect = ['MLA404']\ncontext = {a = 'x'}\nstrict = true")
    settings = Settings("pytest", {"context": ["b=y"]}).read(folder)
    file = folder / "pyproject.toml"
    rules = MlacheckError(f"{SETTING}: no such rule file or folder", "rules", settings["rules"])
    assert (
        settings.line(rules)
        == f"{file} [tool.mlacheck] rules = '{folder / 'ci' / 'rules'}': no such rule file or folder"
    )
    assert settings.spell("select", "MLA404") == f"{file} [tool.mlacheck] select MLA404"  # one item of the list
    assert settings.spell("strict", True) == f"{file} [tool.mlacheck] strict = true"
    assert settings.spell("context", "a=x") == f"{file} [tool.mlacheck] context a=x"  # the file's item
    assert settings.spell("context", "b=y") == "--mlacheck-context=b=y"  # the option's item


def test_the_library_refuses_with_the_settings_name_and_each_front_end_spells_it(tmp_path):
    """ReportPolicy names `select` whoever gave it: the CLI, pytest and the file each write it their way."""
    with pytest.raises(MlacheckError) as caught:
        ReportPolicy.of(select=["MLA001", "MLA777"])
    error = caught.value
    assert str(error).startswith("--select MLA777: no such finding code")  # the command line's, by default
    assert Settings("pytest", {"select": ["MLA777"]}).line(error).startswith("--mlacheck-select=MLA777: no such")
    file = project(tmp_path, "select = ['MLA777']") / "pyproject.toml"
    assert Settings("cli", {}).read(tmp_path).line(error).startswith(f"{file} [tool.mlacheck] select MLA777: no")


def test_an_error_raised_where_the_setting_is_not_known_is_named_by_the_caller():
    with pytest.raises(MlacheckError) as caught, about("context"):
        raise MlacheckError(f"{SETTING} d_qk=abc: contracts compare it with integers")
    assert Settings("pytest", {"context": ["d_qk=abc"]}).line(caught.value).startswith("--mlacheck-context d_qk=abc:")


def test_values_no_mode_takes_are_refused(tmp_path):
    for given, words in (
        ({"num_sms": 100000}, "--num-sms 100000: more SMs than any GPU has"),
        ({"rules": str(tmp_path / "nope")}, f"--rules {tmp_path / 'nope'}: no such rule file or folder"),
        ({"json": ""}, "--json: give a file path (it was given empty)"),
    ):
        settings = Settings("cli", given)
        with pytest.raises(MlacheckError) as caught:
            settings.check()
        assert settings.line(caught.value).startswith(words)


def _library_modules():
    for path in sorted((ROOT / "mlacheck").rglob("*.py")):
        if path.name not in FRONT_ENDS:
            yield path, ast.parse(path.read_text())


def _raised(tree: ast.AST):
    """(message's first text, the setting named) of every MlacheckError(...) and about(...) call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("MlacheckError", "about"):
            first = node.args[0] if node.args else None
            text = first.value if isinstance(first, ast.Constant) else None
            if isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
                text = first.values[0].value
            index = 0 if node.func.id == "about" else 1
            named = node.args[index] if len(node.args) > index else None
            named = next((k.value for k in node.keywords if k.arg == "setting"), named)
            yield text, named.value if isinstance(named, ast.Constant) else None


def test_library_errors_name_only_settings_of_the_table():
    for path, tree in _library_modules():
        for _, named in _raised(tree):
            assert named is None or named in SETTINGS, (path, named)


def test_no_library_error_starts_with_a_flag_the_pytest_plugin_takes():
    """Such a line would name `--rules` to a pytest user, who wrote --mlacheck-rules (the plugin once rewrote those
    lines with a table of flag names)."""
    flags = {setting.flags[0].split("/")[0] for setting in SETTINGS.values() if setting.pytest}
    for path, tree in _library_modules():
        for text, _ in _raised(tree):
            first = (text or "").split(" ")[0].rstrip(":")
            assert first not in flags or (path.name, first) in OWN_FLAGS, (path, text)


def test_the_ci_page_lists_every_pytest_option_and_every_pyproject_key():
    """docs/ci.md's hand-written plugin table and pyproject example (the generated settings page has them all)."""
    page = (ROOT / "docs" / "ci.md").read_text()
    plugin = page.split("## `pytest --mlacheck`")[1].split("\n## ")[0]
    table = page.split("## Configuration: `[tool.mlacheck]` in pyproject.toml")[1].split("\n## ")[0]
    for setting in SETTINGS.values():
        assert not setting.pytest or f"`{setting.option}" in plugin, setting.option
        assert not setting.key or setting.name in table, setting.name
