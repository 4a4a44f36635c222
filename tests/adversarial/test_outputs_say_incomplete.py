"""An incomplete run looks incomplete in every output, with --allow-incomplete too; a run whose supervisor was killed
is incomplete everywhere; a selection that selects nothing is refused."""

import os
import signal
import subprocess
import sys
import time

from tests.adversarial.conftest import (
    ROOT,
    SYNTHETIC,
    WARM,
    assert_not_pass,
    assert_pass,
    observe,
    program,
    read_outputs,
)
from tests.processes import alive


def test_the_control_passes(tmp_path):
    assert_pass(observe(tmp_path, sys.executable, program(tmp_path, WARM)))


def test_a_dispatch_that_dies_before_its_lookup_is_incomplete_in_every_output(tmp_path):
    text = WARM + "try:\n    k.dispatch(None)\nexcept ValueError:\n    pass\n"
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert_not_pass(result, "incomplete")


def test_allow_incomplete_passes_the_exit_code_but_no_document_says_pass(tmp_path):
    text = WARM + "try:\n    k.dispatch(None)\nexcept ValueError:\n    pass\n"
    result = observe(tmp_path, sys.executable, program(tmp_path, text), options=("--allow-incomplete",))
    assert result.code == 0
    assert_not_pass(result, "incomplete", allow_incomplete=True)


def test_a_run_whose_supervisor_was_killed_reads_incomplete_in_every_output(tmp_path):
    """mlacheck SIGKILLed: no process of the program is left 3 s later (a detached child in a session of its own
    included), and the run folder reads as incomplete everywhere."""
    pids = tmp_path / "pids"
    text = WARM + (
        "import os, subprocess, sys, time\n"
        "detached = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{detached.pid}}')\n"
        "time.sleep(60)\n"
    )
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CUTE_DSL_ARCH", None)
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", SYNTHETIC, "--run-dir", str(run_dir), "--"]
        + [sys.executable, program(tmp_path, text)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # the warm-up and its dispatch are written, the detached child started
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait()
    time.sleep(3)
    left = [int(pid) for pid in pids.read_text().split() if alive(int(pid))]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes of the program left running after mlacheck was killed: {left}"
    out = tmp_path / "out"
    out.mkdir()
    outputs = {fmt: out / f"report.{fmt}" for fmt in ("json", "junit", "sarif", "github")}
    args = [sys.executable, "-m", "mlacheck", "report", str(run_dir)]
    for fmt, path in outputs.items():
        args += ["--output", f"{fmt}:{path}"]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    result = read_outputs(done.returncode, done.stdout, done.stderr, outputs, run_dir)
    assert_not_pass(result, "incomplete")
    assert "the run never finished" in result.report["incomplete"][0]


def test_a_selection_that_selects_nothing_is_refused_in_one_line(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlacheck",
            "run",
            "--select",
            "",
            "--rules",
            SYNTHETIC,
            "--run-dir",
            str(tmp_path / "r"),
        ]
        + ["--", sys.executable, "-c", "pass"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "mlacheck: error: --select selects no finding code (it was given empty); name the codes to keep (e.g. "
        "MLA001), or leave it out to keep them all"
    ]
