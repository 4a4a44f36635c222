"""Run a program under observation: its environment gets the bootstrap folder on PYTHONPATH and the run
folder's location, for this run only; nothing is written into any installation."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from mlacheck.errors import MlacheckError
from mlacheck.program.agent import ENV_COMPILE, ENV_RULES, ENV_RUN_DIR
from mlacheck.program.rundir import RunDir
from mlacheck.rules import load_rules

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"


def observed_environment(run: RunDir, compile_policy: str, base: dict[str, str]) -> dict[str, str]:
    """The program's environment: the caller's, plus what starts the agent in every Python process."""
    python_path = os.pathsep.join(filter(None, [str(BOOTSTRAP), base.get("PYTHONPATH", "")]))
    return {**base, "PYTHONPATH": python_path, ENV_RUN_DIR: str(run.path), ENV_RULES: str(run.rules_dir),
            ENV_COMPILE: compile_policy}


def run_program(command: list[str], run_dir: Path | None, rules_path: Path | None, compile_policy: str = "real") -> RunDir:
    """Run `command` to its end under observation and write meta.json (command, exit code, signal)."""
    rules = load_rules(rules_path)
    run = RunDir.create(run_dir)
    run.save_rules(rules)
    started = time.time()
    try:
        returncode = subprocess.call(command, env=observed_environment(run, compile_policy, dict(os.environ)))
    except (FileNotFoundError, PermissionError) as exc:
        raise MlacheckError(f"cannot start {command[0]!r}: {exc.strerror}; check the command after --") from None
    except KeyboardInterrupt:
        returncode = -signal.SIGINT
    run.write_meta({
        "command": command, "started": started, "ended": time.time(), "compile_policy": compile_policy,
        "exit_code": returncode if returncode >= 0 else None,
        "signal": signal.Signals(-returncode).name if returncode < 0 else None,
    })
    return run
