"""The front door: one Observation (prepare, start, stop, report) that `mlacheck run -- COMMAND`, `mlacheck report` and
`pytest --mlacheck` hold, and settings that each front end names as the user wrote them. Subprocesses: the agent
hooks module imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "tests" / "fixtures" / "synthetic.toml"

OBSERVED = f"""
import json, os, subprocess, sys
sys.path.insert(0, {str(ROOT)!r})
from pathlib import Path
from mlacheck.program.observation import Observation
from mlacheck.program.session import ProgramOptions

before = dict(os.environ)
observation = Observation(ProgramOptions(run_dir=Path("run"), rules=Path({str(RULES)!r})))
observation.prepare()
observation.start()
from tests.fixtures import synthetic_kernels as k
k.warmup(dtypes=("fp8",), causal=(True,))
k.dispatch(1, "fp8", True)
child = "from tests.fixtures import synthetic_kernels as k; k.dispatch(1, 'fp8', False)"  # a serving-path compile
subprocess.run([sys.executable, "-c", child], check=True)
observation.stop(["observed.py"], 0)
observation.stop()  # once stopped, again does nothing
report = observation.report()
print(json.dumps({{
    "verdict": report.verdict,
    "codes": sorted(f["code"] for f in report.findings),
    "in_the_child": all(f["process"]["pid"] != os.getpid() for f in report.findings),
    "processes": len(report.processes),
    "restored": dict(os.environ) == before,
    "command": report.program["command"],
}}))
"""


def test_an_observation_of_this_process_and_its_child_reports_the_childs_serving_path_compile(tmp_path):
    """The in-process observation (the pytest plugin's): the child's compile is seen (FAIL, not a PASS that missed
    it), the environment is restored, and the run folder reports the same again as a saved observation."""
    (tmp_path / "observed.py").write_text(OBSERVED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("MLACHECK_RUN_DIR", None)
    done = subprocess.run(
        [sys.executable, "observed.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {
        "verdict": "fail",
        "codes": ["MLA001"],
        "in_the_child": True,
        "processes": 2,
        "restored": True,
        "command": ["observed.py"],
    }
    run_dir = tmp_path / "run"
    assert (run_dir / "meta.json").is_file() and (run_dir / "processes.json").is_file()  # the watcher's tree
    again = subprocess.run(
        [sys.executable, "-m", "mlacheck", "report", str(run_dir), "--json", str(tmp_path / "again.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 1, again.stdout + again.stderr
    report = json.loads((tmp_path / "again.json").read_text())
    assert [f["code"] for f in report["findings"]] == ["MLA001"] and report["program"]["command"] == ["observed.py"]


def test_a_saved_report_and_run_folders_together_are_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "report.json").write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "report", str(tmp_path / "report.json"), str(tmp_path / "run")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "give one saved JSON report, or run folders only" in done.stderr, done.stderr


@pytest.fixture
def inner(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    for name in ("MLACHECK_RUN_DIR", "PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    return pytester


pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    "args, table, words",
    [
        (["--mlacheck-select="], "", "mlacheck: --mlacheck-select selects no finding code (it was given empty)"),
        (["--mlacheck-rules=nope.toml"], "", "mlacheck: --mlacheck-rules=nope.toml: no such rule file or folder"),
        (["--mlacheck-num-sms=100000"], "", "mlacheck: --mlacheck-num-sms=100000: more SMs than any GPU has"),
        (["--mlacheck-context=novalue"], "", "mlacheck: --mlacheck-context=novalue: write KEY=VALUE"),
        (["--mlacheck-serving-start=nocolon"], "", "mlacheck: --mlacheck-serving-start=nocolon: write MODULE:QUALNAME"),
        (["--mlacheck-arch=sm_1a"], "", "mlacheck: --mlacheck-arch=sm_1a: no loaded family has kernels for it"),
        (["--mlacheck-output=xml:r.xml"], "", "mlacheck: --mlacheck-output=xml:r.xml: unknown format 'xml'"),
        ([], "baseline = 'nope.json'", "[tool.mlacheck] baseline = '{folder}/nope.json': cannot read it"),
        (
            [],
            "context = {kv_cache_dtype = 'nonsense'}",
            "[tool.mlacheck] context kv_cache_dtype=nonsense: contracts compare it with dtype names",
        ),
    ],
)
def test_a_pytest_option_or_a_pyproject_key_is_named_as_written(inner, args, table, words):
    """Before: the plugin rewrote the CLI's lines with a table of flags (`check the --mlacheck-rules=path`), named a
    [tool.mlacheck] context value as its own option, and took an SM count no GPU has."""
    if table:
        (inner.path / "pyproject.toml").write_text(f"[tool.mlacheck]\n{table}\n")
    rules = [] if "context" in table else [f"--mlacheck-rules={RULES}"]  # the bundled rules show a dtype's kind
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "--mlacheck", *rules, *args)
    text = "\n".join(result.outlines + result.errlines)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert words.format(folder=inner.path) in text and "Traceback" not in text, text
    assert not (inner.path / "mlacheck-runs").exists()  # refused before a run folder was made
