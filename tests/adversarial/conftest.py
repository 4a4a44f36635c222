"""Attacks on the verdict: each test runs a real program (real processes, real signals) under `mlacheck run` and
asserts that the run does not pass, in every output a CI job reads: the JSON report, JUnit, SARIF, the GitHub
annotations, the exit code and the terminal's verdict line. `observe` runs it; `assert_not_pass` checks them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
WARM = "from tests.fixtures import synthetic_kernels as k\nk.warmup(dtypes=('fp8',), causal=(True,))\nk.dispatch(1)\n"
"""A clean warm-up of (fp8, True) that a dispatch then uses: a run with nothing else passes."""


@dataclass
class Outputs:
    """What one `mlacheck run` left for CI to read."""

    code: int
    stdout: str
    stderr: str
    report: dict
    junit: ET.Element
    sarif: dict
    github: str
    run_dir: Path

    @property
    def verdict_line(self) -> str:
        return next((line for line in reversed(self.stdout.splitlines()) if line.startswith("verdict:")), "")


def program(tmp_path: Path, text: str, name: str = "program.py") -> str:
    """A program file in tmp_path (its text dedented by the caller)."""
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def observe(
    tmp_path: Path,
    *command: str,
    rules: str | None = SYNTHETIC,
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> Outputs:
    """`mlacheck run --rules RULES --run-dir ... --output json/junit/sarif/github ... -- COMMAND` in a subprocess."""
    out = tmp_path / "out"
    out.mkdir(parents=True, exist_ok=True)
    run_dir = tmp_path / "run"
    outputs = {fmt: out / f"report.{fmt}" for fmt in ("json", "junit", "sarif", "github")}
    args = [sys.executable, "-m", "mlacheck", "run", "--run-dir", str(run_dir)]
    args += ["--rules", rules] if rules else []
    for fmt, path in outputs.items():
        args += ["--output", f"{fmt}:{path}"]
    args += [*options, "--", *command]
    environ = {name: value for name, value in os.environ.items() if name != "CUTE_DSL_ARCH"}
    environ.update({"COLUMNS": "160", "PYTHONPATH": str(ROOT), **(env or {})})
    done = subprocess.run(args, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=timeout)
    return read_outputs(done.returncode, done.stdout, done.stderr, outputs, run_dir)


def observe_wrapped(tmp_path, wrapper, command, run_dir, env):
    """`mlacheck run` (every output requested) under `wrapper`, a command that runs its arguments."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    outputs = {fmt: out / f"report.{fmt}" for fmt in ("json", "junit", "sarif", "github")}
    args = [*wrapper, sys.executable, "-m", "mlacheck", "run", "--rules", SYNTHETIC, "--run-dir", str(run_dir)]
    for fmt, path in outputs.items():
        args += ["--output", f"{fmt}:{path}"]
    environ = {name: value for name, value in os.environ.items() if name != "CUTE_DSL_ARCH"}
    environ.update({"COLUMNS": "160", "PYTHONPATH": str(ROOT), **env})
    done = subprocess.run([*args, "--", *command], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300)
    return read_outputs(done.returncode, done.stdout, done.stderr, outputs, run_dir)


def read_outputs(code: int, stdout: str, stderr: str, outputs: dict[str, Path], run_dir: Path) -> Outputs:
    missing = [str(path) for path in outputs.values() if not path.exists()]
    assert not missing, f"outputs not written: {missing}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    return Outputs(
        code,
        stdout,
        stderr,
        json.loads(outputs["json"].read_text()),
        ET.fromstring(outputs["junit"].read_text()),
        json.loads(outputs["sarif"].read_text()),
        outputs["github"].read_text(),
        run_dir,
    )


def assert_not_pass(result: Outputs, verdict: str | None = None, allow_incomplete: bool = False) -> None:
    """The run did not pass, and every output says so: FAIL as failures, INCOMPLETE as errors (also where
    --allow-incomplete lets the exit code pass)."""
    context = f"\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    got = result.report["verdict"]
    assert got in ("fail", "incomplete"), f"verdict {got}{context}"
    if verdict is not None:
        assert got == verdict, f"verdict {got}, expected {verdict}{context}"
    assert "PASS" not in result.verdict_line and got.upper() in result.verdict_line, result.verdict_line
    if not allow_incomplete or got == "fail":
        assert result.code != 0, f"exit 0 for a run that did not pass{context}"
    suite = result.junit.find("testsuite")
    run = result.sarif["runs"][0]
    annotations = [line for line in result.github.splitlines() if line.startswith("::error")]
    if got == "fail":
        assert int(suite.get("failures")) > 0, ET.tostring(result.junit, encoding="unicode")
        assert any(r.get("level") == "error" for r in run["results"]), run["results"]
        assert annotations, result.github
    else:
        assert result.report["incomplete"], result.report
        assert int(suite.get("errors")) >= len(result.report["incomplete"]), ET.tostring(result.junit, "unicode")
        assert run["invocations"][0]["executionSuccessful"] is False, run["invocations"]
        assert sum("title=mlacheck incomplete" in line for line in annotations) >= len(result.report["incomplete"])


def assert_pass(result: Outputs) -> None:
    """The control: the same program without the attack passes (so the attack is what the verdict caught)."""
    assert result.report["verdict"] == "pass", f"{result.report['verdict']}: {result.report.get('incomplete')}" + (
        f"\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    assert result.code == 0 and "PASS" in result.verdict_line
