"""Runs the real CLI in a subprocess, as a user's shell or CI does."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str
    report: dict | None


def run_cli(*args: str, tmp_path: Path | None = None, env_extra: dict | None = None, cwd: Path = ROOT) -> CliResult:
    """`python -m mlacheck ARGS`; with tmp_path, also `--json` into it and the parsed report back."""
    json_path = None
    if tmp_path is not None and args and args[0] == "run":
        json_path = tmp_path / "report.json"
        args = (args[0], "--json", str(json_path), *args[1:])  # before any `-- COMMAND`
    env = {name: value for name, value in os.environ.items() if name != "CUTE_DSL_ARCH"}
    env.update({"COLUMNS": "160", **(env_extra or {})})
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    report = json.loads(json_path.read_text()) if json_path is not None and json_path.exists() else None
    return CliResult(done.returncode, done.stdout, done.stderr, report)
