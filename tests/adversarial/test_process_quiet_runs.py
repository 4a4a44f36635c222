"""Quiet runs: while a run of the user's is active, a Python process that is not part of it imports nothing of
mlacheck, so a pytest session of the same user prints no warning from mlacheck (pytest warns that it cannot rewrite
a module imported before it); a pytest session inside a run is quiet too."""

import os
import subprocess
import sys
import time

from tests.adversarial.conftest import ROOT, SYNTHETIC, WARM, program

A_TEST = "def test_nothing():\n    assert True\n"


def pytest_session(tmp_path, *wrapper: str) -> str:
    (tmp_path / "suite").mkdir(exist_ok=True)
    (tmp_path / "suite" / "test_it.py").write_text(A_TEST)
    env = {name: value for name, value in os.environ.items() if name != "MLACHECK_RUN_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [*wrapper, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-W", "default", str(tmp_path / "suite")],
        cwd=tmp_path / "suite",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.stdout + done.stderr


def test_a_pytest_session_beside_an_active_run_prints_no_warning_from_mlacheck(tmp_path):
    started = tmp_path / "started"
    text = WARM + f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(30)\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", SYNTHETIC, "--run-dir", str(tmp_path / "run"), "--"]
        + [sys.executable, program(tmp_path, text)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.05)
        output = pytest_session(tmp_path)
    finally:
        run.kill()
        run.wait()
    assert "1 passed" in output and "PytestAssertRewriteWarning" not in output, output
    assert "warnings" not in output.splitlines()[-1], output


def test_a_pytest_session_inside_a_run_prints_no_warning_from_mlacheck(tmp_path):
    wrapper = (sys.executable, "-m", "mlacheck", "run", "-q", "--rules", SYNTHETIC, "--run-dir", str(tmp_path / "run"))
    output = pytest_session(tmp_path, *wrapper, "--")
    assert "1 passed" in output and "PytestAssertRewriteWarning" not in output, output
