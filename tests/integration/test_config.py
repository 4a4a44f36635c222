"""[tool.mlacheck] through the real CLI: the file's settings apply, and the command line overrides them (the
precedence mlacheck/config.py and the README state). --compile skip: seconds on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.cli import ROOT, run_cli

EAGER = ("run", "--compile", "skip", "--cuda-graph", "off")


def project(tmp_path, table: str):
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'served'\n\n[tool.mlacheck]\n{table}\n")
    return tmp_path


def test_the_files_settings_apply_and_the_command_line_overrides_them(tmp_path):
    folder = project(
        tmp_path,
        "profile = 'tokenspeed'\nkernel = 'decode'\nignore = ['MLA001']\noutput = ['json:out/report.json']\n",
    )
    (folder / "out").mkdir()
    from_file = run_cli(*EAGER, cwd=folder)
    assert from_file.code == 0, from_file.stdout + from_file.stderr  # the four MLA001 are ignored
    report = json.loads((folder / "out" / "report.json").read_text())
    assert report["scenario"]["kernels"] == ["decode"] and report["ignore"] == ["MLA001"]
    assert report["counts"]["ignored"] == 4 and "4 ignored" in from_file.stdout.splitlines()[-1]

    (folder / "out" / "report.json").unlink()
    overridden = run_cli(*EAGER, "--ignore", "MLA002", "--kernel", "all", "--output", "json:cli.json", cwd=folder)
    assert overridden.code == 1, overridden.stdout  # --ignore replaced the file's list: MLA001 fails again
    report = json.loads((folder / "cli.json").read_text())
    assert report["scenario"]["kernels"] == ["prefill", "decode"] and report["ignore"] == ["MLA002"]
    assert not (folder / "out" / "report.json").exists()  # --output replaced the file's outputs


def test_context_from_the_file_and_the_command_line_merge_the_command_line_winning(tmp_path):
    folder = project(tmp_path, "kernel = 'prefill'\ncontext = {kv_cache_dtype = 'bfloat16'}\n")
    from_file = run_cli("run", "--compile", "skip", cwd=folder, tmp_path=tmp_path)
    assert from_file.code == 1 and {f["code"] for f in from_file.report["findings"]} == {"MLA003"}
    overridden = run_cli(
        "run", "--compile", "skip", "--context", "kv_cache_dtype=float8_e4m3fn", cwd=folder, tmp_path=tmp_path
    )
    assert overridden.code == 0 and overridden.report["findings"] == [], overridden.stdout


def test_strict_and_select_from_the_file(tmp_path):
    folder = project(tmp_path, "profile = 'vllm'\nkernel = 'prefill'\nstrict = true\nselect = ['MLA002']\n")
    strict = run_cli("run", "--compile", "skip", cwd=folder, tmp_path=tmp_path)
    assert strict.code == 1 and strict.report["strict"] and strict.report["select"] == ["MLA002"]
    assert {f["code"] for f in strict.report["findings"] if not f["ignored"]} == {"MLA002"}
    lenient = run_cli("run", "--compile", "skip", "--no-strict", cwd=folder, tmp_path=tmp_path)
    assert lenient.code == 0 and not lenient.report["strict"], lenient.stdout


def test_a_selection_that_the_file_s_ignore_drops_whole_is_refused_in_one_line(tmp_path):
    """--select MLA002 with the file's ignore = ['MLA002']: nothing could count, so a failing run would pass."""
    folder = project(tmp_path, "ignore = ['MLA002']\n")
    result = run_cli("run", "--select", "MLA002", "--", sys.executable, "-c", "pass", cwd=folder)
    assert result.code == 2 and result.stderr.strip() == (
        f"mlacheck: error: {folder / 'pyproject.toml'} [tool.mlacheck] ignore drops every code that select keeps "
        "(MLA002), so no finding could count; take them out of ignore, or select others"
    )
    kept = run_cli("run", "--select", "MLA001,MLA002", "--", sys.executable, "-c", "pass", cwd=folder)
    assert "drops every code" not in kept.stderr, kept.stderr


def test_a_bad_setting_is_one_line_before_anything_runs(tmp_path):
    folder = project(tmp_path, "kernel = 'nope'\n")
    result = run_cli("run", "--compile", "skip", cwd=folder)
    assert result.code == 2 and result.stderr.strip() == (  # the file by its path, as every other setting of it
        f"mlacheck: error: {folder / 'pyproject.toml'} [tool.mlacheck] kernel = 'nope': choose one of prefill, decode, all"
    )
    (folder / "pyproject.toml").write_text("[tool.mlacheck]\nselect = ['MLA404']\n")
    result = run_cli("report", str(folder), cwd=folder)
    assert result.code == 2 and result.stderr.startswith(  # the file's key, not a flag the user never gave
        f"mlacheck: error: {folder / 'pyproject.toml'} [tool.mlacheck] select MLA404: no such finding code"
    )


def test_the_pytest_plugin_reads_the_table_too(tmp_path):
    """A session whose only finding is a serving-path compile passes when [tool.mlacheck] ignores MLA001, and writes
    the file's outputs."""
    project(tmp_path, "ignore = ['MLA001']\noutput = ['html:report.html']\n")
    (tmp_path / "test_serving.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom tests.fixtures import synthetic_kernels as k\n\n"
        "def test_serving():\n    k.warmup(dtypes=('fp8',), causal=(True,))\n    k.dispatch(1, 'fp8', True)\n"
        "    k.dispatch(1, 'fp8', False)\n"
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--mlacheck"]
    command += [f"--mlacheck-rules={ROOT / 'tests' / 'fixtures' / 'synthetic.toml'}", "--mlacheck-run-dir=run"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "ignored: MLA001 serving-path-compile [error] synthetic (causal=False)" in done.stdout
    assert 'class="compile serving-path"' in (tmp_path / "report.html").read_text()
    replaced = subprocess.run(
        [*command[:-1], "--mlacheck-run-dir=run2", "--mlacheck-ignore=MLA002"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replaced.returncode == 1, replaced.stdout[-2000:]  # the command line's list replaced the file's
