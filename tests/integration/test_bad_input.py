"""Bad input through the real CLI: exit code 2, one `mlacheck: error:` line on stderr naming the problem, no traceback.

Every run uses `--compile skip`, so nothing compiles and each subprocess takes a few seconds on the CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "bad_input"
BUNDLED_RULE = (REPO / "mlacheck" / "rulefiles" / "bundled" / "tokenspeed_mla_prefill.toml").read_text(encoding="utf-8")
KEY_FIELDS_LINE = next(line for line in BUNDLED_RULE.splitlines() if line.startswith("key_fields = "))


def run_cli(*args, env_extra=None, cwd=None) -> subprocess.CompletedProcess:
    env = os.environ.copy()
    env.pop("CUTE_DSL_ARCH", None)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "mlacheck", *map(str, args)],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    shown = f"rc={result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert "Traceback" not in result.stdout and "Traceback" not in result.stderr, shown
    assert result.returncode == 2, shown
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), shown
    line = lines[0]
    assert line.startswith("mlacheck: error:"), shown
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def pythonpath_first(folder: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)}


def edited(old: str, new: str) -> str:
    assert old in BUNDLED_RULE, old
    return BUNDLED_RULE.replace(old, new, 1)


# name -> (rule file text, substrings the error must contain besides the file's path)
RULE_FILES = {
    "broken_toml": (BUNDLED_RULE + "\n[family\nname = \n", ["broken TOML"]),
    "unknown_key": (edited("[family]\n", '[family]\ncolour = "red"\n'), ["family.colour", "unknown key"]),
    "wrong_type": (edited(KEY_FIELDS_LINE, 'key_fields = "q_dtype"'), ["family.key_fields", "valid list"]),
    "contract_field_not_a_key_field": (
        BUNDLED_RULE + '\n[[contract]]\nfield = "num_splits"\nequals = "1"\n',
        ["'num_splits'", "family.key_fields"],
    ),
    "no_prefill_family": (
        edited('name = "tokenspeed_mla.prefill"', 'name = "other.family"'),
        ["the scenario drives tokenspeed_mla.prefill, but no rule file declares it"],
    ),
}


@pytest.mark.parametrize("command", ["run", "rules"])
@pytest.mark.parametrize("case", RULE_FILES)
def test_bad_rule_file(tmp_path, case, command):
    text, needles = RULE_FILES[case]
    rule_file = tmp_path / f"{case}.toml"
    rule_file.write_text(text, encoding="utf-8")
    args = ["run", "--compile", "skip"] if command == "run" else ["rules"]
    if case == "no_prefill_family" and command == "rules":
        assert run_cli("rules", "--rules", rule_file).returncode == 0  # only the scenario needs the prefill family
        return
    assert_one_line_error(run_cli(*args, "--rules", rule_file), str(rule_file), *needles)


def test_rules_folder_without_toml(tmp_path):
    (tmp_path / "README.txt").write_text("no rules here\n")
    assert_one_line_error(run_cli("run", "--compile", "skip", "--rules", tmp_path), str(tmp_path), "no *.toml")


def test_rules_path_missing(tmp_path):
    missing = tmp_path / "nope.toml"
    assert_one_line_error(
        run_cli("run", "--compile", "skip", "--rules", missing), str(missing), "no such rule file or folder"
    )


def test_rules_folder_with_duplicate_family(tmp_path):
    for name in ("a.toml", "b.toml"):
        (tmp_path / name).write_text(BUNDLED_RULE, encoding="utf-8")
    assert_one_line_error(
        run_cli("run", "--compile", "skip", "--rules", tmp_path),
        str(tmp_path),
        "'tokenspeed_mla.prefill'",
        "more than one rule file",
    )


def test_tokenspeed_mla_not_installed():
    result = run_cli("run", "--compile", "skip", env_extra=pythonpath_first(FIXTURES / "no_tokenspeed_mla"))
    assert_one_line_error(result, "tokenspeed_mla cannot be imported", "pip install tokenspeed-mla")


def test_tokenspeed_mla_stubbed_without_tokenspeed_triton():
    env = pythonpath_first(FIXTURES / "no_tokenspeed_triton")
    probe = subprocess.run(
        [sys.executable, "-c", "import tokenspeed_mla; print(repr(tokenspeed_mla._IMPORT_ERROR))"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "tokenspeed_triton" in probe.stdout, probe.stderr  # the simulation really takes the stub branch
    line = assert_one_line_error(run_cli("run", "--compile", "skip", env_extra=env), "stubbed", "tokenspeed-triton")
    assert "tokenspeed_triton" in line  # the underlying import error is quoted too


@pytest.mark.parametrize(
    ("warmup", "needles"),
    [
        ("tests/fixtures/bad_input/warmups.py:does_not_exist", ["warmups.py", "no function 'does_not_exist'"]),
        ("tests/fixtures/bad_input/warmups.py:x", ["warmups.py:x: x is an int, not a function; name the warm-up"]),
        ("nowhere.py:f", ["no such file nowhere.py"]),
        ("not_a_module_xyz:f", ["cannot import not_a_module_xyz"]),
        ("garbage", ["--warmup 'garbage'", "PATH.py:FUNC"]),
        ("tests/fixtures/bad_input/warmups.py:raises", ["warmups.py:raises", "RuntimeError: boom"]),
    ],
    ids=["no_function", "not_a_function", "no_file", "no_module", "no_colon", "raises"],
)
def test_bad_warmup(warmup, needles):
    assert_one_line_error(run_cli("run", "--compile", "skip", "--warmup", warmup), *needles)


@pytest.mark.parametrize(
    ("option", "value", "needles"),
    [
        ("--arch", "sm_90a", ["--arch sm_90a", "sm_100a, sm_103a, sm_107a"]),
        ("--tp", "3", ["--tp 3", "does not divide the 128 heads"]),
        ("--model", "nosuch", ["'nosuch'", "deepseek-v3, kimi-k2"]),
    ],
)
def test_bad_option(option, value, needles):
    assert_one_line_error(run_cli("run", "--compile", "skip", option, value), *needles)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (
            ("--profile", "sglang", "--prefill-backend", "tokenspeed_mla"),
            [
                "SGLang 0.5.23 has no tokenspeed_mla prefill",
                "serving_hook.py:304",
                "--profile sglang@0.5.13, tokenspeed or vllm models it",
            ],
        ),
        (("--profile", "tokenspeed", "--prefill-backend", "fa4"), ["registers fa4 for MHA only", "--profile vllm"]),
    ],
)
def test_a_prefill_backend_the_profile_never_runs_is_refused(args, needles):
    assert_one_line_error(run_cli("run", "--compile", "skip", *args), *needles)


def test_json_path_unwritable():
    result = run_cli("run", "--compile", "skip", "--json", "/nonexistent_dir/x.json")
    assert_one_line_error(result, "/nonexistent_dir/x.json", "cannot write")


def test_trace_path_unwritable():
    result = run_cli("run", "--compile", "skip", "--trace", "/nonexistent_dir/t.jsonl")
    assert_one_line_error(result, "/nonexistent_dir/t.jsonl")


def test_clean_run_passes(tmp_path):
    """Positive control: the same harness sees a success, so the failures above are not an artefact of it."""
    report = tmp_path / "report.json"
    result = run_cli("run", "--compile", "skip", "--json", report)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr and not result.stderr.strip()
    assert '"verdict": "pass"' in report.read_text(encoding="utf-8")


def test_program_mode_checks_arch_against_the_families_loaded(tmp_path):
    """FA4 has an SM90 forward: sm_90a is a target of the bundled rules; a rule set of SM100-only families refuses it."""
    accepted = run_cli(
        "run", "--dry", "--arch", "sm_90a", "--run-dir", tmp_path / "a", "--", sys.executable, "-c", "pass"
    )
    assert "--arch" not in accepted.stderr and accepted.returncode == 2, (
        accepted.stdout + accepted.stderr
    )  # nothing seen
    assert "nothing was checked" in accepted.stdout
    only_sm100 = REPO / "mlacheck" / "rulefiles" / "bundled" / "tokenspeed_mla_prefill.toml"
    refused = run_cli(
        "run",
        "--dry",
        "--arch",
        "sm_90a",
        "--rules",
        only_sm100,
        "--run-dir",
        tmp_path / "b",
        "--",
        sys.executable,
        "-c",
        "pass",
    )
    assert_one_line_error(refused, "--arch sm_90a: no loaded family has kernels for it", "sm_100a, sm_103a, sm_107a")


def test_a_cache_kind_no_adapter_has_is_one_line(tmp_path):
    rule_file = tmp_path / "odd.toml"
    rule_file.write_text(edited('cache = "_compiled_kernels"\n', 'cache = "_compiled_kernels"\ncache_kind = "lmdb"\n'))
    line = assert_one_line_error(run_cli("rules", "--rules", rule_file), str(rule_file), "family.cache_kind")
    assert "unknown kind 'lmdb': choose one of dict, class_dict, closure_dict, functools" in line


def test_rules_template_retargets_a_module_s_rules_at_what_is_installed():
    result = run_cli("rules", "--template", "tokenspeed_mla.mla_prefill")
    assert result.returncode == 0, result.stderr
    assert "# A starting rule for tokenspeed_mla.mla_prefill as installed (tokenspeed-mla " in result.stdout
    version = result.stdout.split("as installed (tokenspeed-mla ")[1].split(")")[0]
    assert f'checked_versions = "=={version}"' in result.stdout and 'name = "tokenspeed_mla.prefill"' in result.stdout
    assert_one_line_error(
        run_cli("rules", "--template", "no.such.module"),
        "--template no.such.module",
        "no loaded rule watches that module",
    )


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--num-sms", "0"), ["--num-sms 0", "positive"]),
        (("--num-sms", "-1"), ["--num-sms -1", "positive"]),
        (("--max-context-len", "0"), ["--max-context-len 0", "1 token or more"]),
        (("--max-context-len", "-5"), ["--max-context-len -5"]),
        (("--cuda-graph-max-bs", "0"), ["--cuda-graph-max-bs 0", "1 or more"]),
        (("--batch-sizes", "8,0"), ["--batch-sizes 8,0", "positive integers"]),
        (("--tp", "0"), ["--tp 0", "1 or more"]),
        (("--requests", "0"), ["--requests 0", "2 or more"]),
        (("--context", "kv_cache_dtype=nonsense"), ["--context kv_cache_dtype=nonsense", "dtype name"]),
        (("--context", "d_qk=abc"), ["--context d_qk=abc", "integers (192)", "give an integer"]),
        (("--context", "num_heads=many"), ["--context num_heads=many", "integer"]),
        (("--context", "target_arch=sm_0"), ["--context target_arch=sm_0", "sm_100a"]),
        (("--context", "novalue"), ["--context novalue", "KEY=VALUE"]),
        (("--select", "MLA999"), ["--select MLA999", "no such finding code", "MLA001"]),
        (("--ignore", "MLA002,nope"), ["--ignore NOPE", "no such finding code"]),
        (("-q", "-v"), ["--quiet and --verbose"]),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else None,
)
def test_every_bad_value_is_one_line(args, needles):
    """Before: --num-sms 0 and -1 and --max-context-len 0 ran; --context kv_cache_dtype=nonsense gave six false MLA003."""
    assert_one_line_error(run_cli("run", "--compile", "skip", *args), *needles)


def test_a_bad_context_value_in_program_mode_is_one_line_after_the_run_and_the_run_folder_is_kept(tmp_path):
    """Program mode knows a field's kind once the run shows its values (no rule gives an example of causal_mode):
    the report is refused in one line after the run, and the run folder, which holds it all, reports again."""
    rules = tmp_path / "synthetic.toml"
    rules.write_text(
        (REPO / "tests" / "fixtures" / "synthetic.toml").read_text()
        + '\n[[contract]]\nfield = "causal"\nequals_context = "causal_mode"\n'
    )
    program = tmp_path / "p.py"
    program.write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\nfrom tests.fixtures import synthetic_kernels as k\n"
        "k.warmup(dtypes=('bf16',), causal=(True,))\nk.dispatch(1, 'bf16', True)\n"
    )
    run_dir = tmp_path / "run"
    command = ("run", "--rules", rules, "--run-dir", run_dir, "--context", "causal_mode=maybe", "--", sys.executable)
    refused = run_cli(*command, program)
    assert refused.stderr.splitlines()[0] == f"mlacheck: run folder {run_dir}"  # said as the run started
    refused.stderr = refused.stderr.split("\n", 1)[1]
    line = assert_one_line_error(refused, "--context causal_mode=maybe", "booleans (True)", "True or False")
    assert line.endswith(f"; the run is kept: mlacheck report {run_dir} reports it again")
    assert (run_dir / "meta.json").is_file() and list(run_dir.glob("trace-*.jsonl"))
    again = run_cli("report", run_dir, "--context", "causal_mode=True")
    assert again.returncode == 0 and "verdict: PASS" in again.stdout, again.stdout + again.stderr


def test_bare_mlacheck_prints_the_help_and_no_error():
    done = run_cli()
    assert done.returncode == 0 and done.stderr == "", done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("Usage: ") and first.endswith(" [OPTIONS] COMMAND [ARGS]...") and "  rule " in done.stdout


def test_run_help_at_80_columns_names_every_option_whole():
    done = run_cli("run", "--help", env_extra={"COLUMNS": "80"})
    assert done.returncode == 0 and max(len(line) for line in done.stdout.splitlines()) <= 80
    for name in ("--cuda-graph-max-bs", "--max-context-len", "--allow-incomplete", "--serving-start", "--num-sms"):
        assert f"  {name} " in done.stdout or f"  {name}\n" in done.stdout, name  # before: "--cuda-graph-max…"
    assert "--serving-start MODULE:QUALNAME[@return]" in done.stdout  # before: rich read [@return] as markup


def test_manifest_takes_json_colon_path_as_output_does(tmp_path):
    saved = tmp_path / "report.json"
    assert run_cli("run", "--compile", "skip", "--kernel", "prefill", "--json", saved).returncode == 0
    done = run_cli("manifest", saved, "--output", "json:m.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "m.json").is_file() and not (tmp_path / "json:m.json").exists()
    assert_one_line_error(run_cli("manifest", saved, "--output", "sarif:m.sarif", cwd=tmp_path), "a manifest is JSON")


def test_report_of_a_folder_that_is_no_run_folder_says_so(tmp_path):
    line = assert_one_line_error(run_cli("report", tmp_path), str(tmp_path), "not a run folder")
    assert "--rules" not in line  # before: a hint to pass --rules, which then found no process


def test_run_dir_that_is_a_file_says_so(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert_one_line_error(run_cli("run", "--run-dir", afile, "--", "true"), f"--run-dir {afile}: is a file")


def test_a_step_function_not_written_module_colon_qualname_is_one_line():
    assert_one_line_error(
        run_cli("run", "--step", "tp2_runner.execute_step", "--", sys.executable, "-c", "pass"),
        "--step tp2_runner.execute_step",
        "MODULE:QUALNAME",
    )
