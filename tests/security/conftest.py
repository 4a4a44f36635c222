"""Shared by the security tests: a real run folder to make hostile copies of, and `mlacheck report` run the way a CI
job on a shared host would, under a memory limit (ulimit -v) and a timeout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
PROGRAM = (
    "from tests.fixtures import synthetic_kernels as k\n"
    "k.warmup(dtypes=('fp8',), causal=(True,))\nk.dispatch(1)\nk.dispatch(1, 'bf16', True)\n"
)
MEMORY_KIB = 1_000_000  # ulimit -v: 1 GB of address space
SECONDS = 60  # a generous bound on a loaded 2-core machine; each case takes a few seconds


def environment() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in ("MLACHECK_RUN_DIR", "CUTE_DSL_ARCH")}
    env.update({"PYTHONPATH": str(ROOT), "COLUMNS": "160"})
    return env


@pytest.fixture(scope="session")
def base_run(tmp_path_factory) -> Path:
    """A run folder of a real run: a warm-up of fp8 and a serving-path compile of bf16 (FAIL, MLA001)."""
    folder = tmp_path_factory.mktemp("base")
    program = folder / "program.py"
    program.write_text(PROGRAM)
    run = folder / "run"
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", SYNTHETIC, "--run-dir", str(run), "--"]
        + [sys.executable, str(program)],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    return run


@pytest.fixture
def copy_of(base_run, tmp_path):
    """A copy of the base run folder to spoil (its trace as trace-9.jsonl, so the cases can name it)."""
    run = tmp_path / "run"
    shutil.copytree(base_run, run)
    [trace] = list(run.glob("trace-*.jsonl"))
    trace.rename(run / "trace-9.jsonl")
    return run


@dataclass
class Reported:
    code: int
    stdout: str
    stderr: str
    seconds: float
    report: dict | None


def report(*args: str, tmp_path: Path) -> Reported:
    """`mlacheck report ARGS --output json:...` under ulimit -v and a timeout."""
    out = tmp_path / "report.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "mlacheck", "report", *args, "--output", f"json:{out}"]
    started = time.monotonic()
    done = subprocess.run(
        ["sh", "-c", f'ulimit -v {MEMORY_KIB} && exec "$@"', "sh", *command],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=SECONDS * 2,
    )
    seconds = time.monotonic() - started
    return Reported(
        done.returncode, done.stdout, done.stderr, seconds, json.loads(out.read_text()) if out.exists() else None
    )


def assert_one_line_error(result: Reported, *needles: str) -> None:
    """Exit 2 with one line on stderr that names what is wrong; in seconds, under the memory limit."""
    assert result.seconds < SECONDS, f"{result.seconds:.1f} s"
    assert result.code == 2, f"exit {result.code}\nstdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlacheck: error: "), result.stderr[-3000:]
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
