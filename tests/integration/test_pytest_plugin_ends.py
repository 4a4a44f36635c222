"""The pytest plugin at a session's edges: what a test leaves running, a session stopped early or ended by a test, a
watcher that could not start or met a banner, a Python run through a shell, and the documents that go to stdout. Each
is a real `pytest --mlacheck` session in a subprocess; none may say PASS where it did not see the whole session."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.integration import test_pytest_plugin as plugin_tests
from tests.integration.test_pytest_plugin import (
    CORRECT_WARMUP,
    HEADER,
    OBSERVE,
    SERVING_COMPILE,
    line_starting,
    run,
    section,
)
from tests.processes import alive

inner = plugin_tests.inner  # the fixture: pytester with tests.fixtures importable, no observation inherited

pytest_plugins = ["pytester"]

OUTPUTS = ("--mlacheck-json=r.json", "--mlacheck-output=junit:r.xml", "--mlacheck-output=sarif:r.sarif")


def assert_incomplete_everywhere(path, reason: str) -> dict:
    """The JSON, JUnit and SARIF documents all say the session is incomplete, for `reason` (its start)."""
    report = json.loads((path / "r.json").read_text())
    assert report["verdict"] == "incomplete", report["incomplete"]
    assert any(line.startswith(reason) for line in report["incomplete"]), report["incomplete"]
    junit = (path / "r.xml").read_text()
    assert 'errors="0"' not in junit.split("\n")[1] and reason.replace("'", "&apos;")[:40] in junit
    sarif = json.loads((path / "r.sarif").read_text())
    assert sarif["runs"][0]["invocations"][0]["executionSuccessful"] is False
    return report


SERVER = (
    "import sys, time\nfrom tests.fixtures import synthetic_kernels as k\n"
    "k.warmup(dtypes=('fp8',), causal=(True,))\nk.dispatch(1, 'fp8', True)\nprint('ready', flush=True)\n"
    "time.sleep(60)\nk.dispatch(1, 'fp8', False)\n"
)
LEFT_RUNNING = f"""
import subprocess, sys

def test_a_server_is_started_and_never_stopped():
    proc = subprocess.Popen([sys.executable, "-c", {SERVER!r}], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    with open("server.pid", "w") as out:
        out.write(str(proc.pid))
"""


def test_a_server_a_test_left_running_is_ended_and_the_session_is_incomplete(inner):
    """a04: the server would compile on the serving path after the report; it is ended at the session's end (as `mlacheck
    run` ends what its program left), named in meta.json, and the session is not PASS."""
    inner.makepyfile(test_left=LEFT_RUNNING)
    result = run(inner, *OBSERVE, "--mlacheck-run-dir=run", *OUTPUTS)
    server = int((inner.path / "server.pid").read_text())
    try:
        assert result.ret == 2, result.text
        assert not alive(server), "the server a test left running outlived the session"
        meta = json.loads((inner.path / "run" / "meta.json").read_text())
        assert [(p["pid"], p["ended_by"]) for p in meta["left_behind"]] == [(server, "SIGTERM")]
        assert_incomplete_everywhere(inner.path, f"pid {server} (")
        assert "left running when the session ended, was ended by mlacheck (SIGTERM)" in result.text
    finally:
        if alive(server):
            os.kill(server, signal.SIGKILL)


BANNER = "print('corp-env: sitecustomize loaded')\n"
NO_WATCHER = "import os\nif b'mlacheck.program.watch' in open('/proc/self/cmdline', 'rb').read():\n    os._exit(3)\n"


@pytest.mark.parametrize("site", ["banner", "no watcher"])
def test_the_process_tree_is_recorded_past_a_banner_or_the_session_says_it_was_not(inner, monkeypatch, site):
    """a12: a sitecustomize that prints on stdout is no handshake failure; a watcher that cannot start makes the session
    INCOMPLETE (it was silently fine before)."""
    (inner.path / "site").mkdir()
    (inner.path / "site" / "sitecustomize.py").write_text(BANNER if site == "banner" else NO_WATCHER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([os.environ["PYTHONPATH"], str(inner.path / "site")]))
    inner.makepyfile(test_serving=CORRECT_WARMUP)
    result = run(inner, *OBSERVE, "--mlacheck-run-dir=run", *OUTPUTS)
    recorded = (inner.path / "run" / "processes.json").exists()
    if site == "banner":
        assert result.ret == pytest.ExitCode.OK and recorded, result.text
        return
    assert result.ret == 2 and not recorded, result.text
    report = assert_incomplete_everywhere(inner.path, "the process tree was not recorded (its watcher ended ")
    assert (
        json.loads((inner.path / "run" / "meta.json").read_text())["session"]["tree"]
        == report["incomplete"][0][len("the process tree was not recorded (") :].split("): ")[0]
    )


THROUGH_A_SHELL = (
    HEADER
    + """
import subprocess

def test_a_python_helper_through_a_shell():
    k.warmup(dtypes=("fp8",), causal=(True,))
    assert k.dispatch(1, "fp8", True) == 2
    subprocess.run(["sh", "-c", 'python -S -c "pass"'], check=True)
"""
)


def test_a_short_python_run_through_a_shell_makes_the_session_incomplete(inner):
    """a10: a Python helper that a shell starts with -S and that ends within a poll of the process tree is named through
    the shell's command line (the spawn event of pytest's own child)."""
    inner.makepyfile(test_shell=THROUGH_A_SHELL)
    result = run(inner, *OBSERVE, "--mlacheck-run-dir=run", "--mlacheck-json=r.json")
    assert result.ret == 2, result.text
    [reason] = json.loads((inner.path / "r.json").read_text())["incomplete"]
    assert reason.startswith("a Python process ran unobserved: pid "), reason
    assert "python -S -c" in reason


def test_documents_on_stdout_start_their_own_line_and_whole_files_are_refused_there(inner):
    """a14: an annotation glued to pytest's "[100%]" line is no annotation; a JSON document mixed into pytest's output
    is no JSON: refused with one usage line."""
    inner.makepyfile(test_serving=SERVING_COMPILE)
    result = run(inner, "-q", *OBSERVE, "--mlacheck-run-dir=run", "--mlacheck-output=github:-")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.text
    annotated = [line for line in result.outlines if "::error" in line or "::warning" in line]
    assert annotated and all(line.startswith(("::error ", "::warning ")) for line in annotated), annotated
    for fmt in ("json", "junit"):
        refused = run(inner, *OBSERVE, "--mlacheck-run-dir=run2", f"--mlacheck-output={fmt}:-")
        assert refused.ret == pytest.ExitCode.USAGE_ERROR, refused.text
        assert f"--mlacheck-output={fmt}:-: a {fmt} document cannot go to stdout here" in refused.text
        assert "Traceback" not in refused.text and not (inner.path / "run2").exists()


SLOW = (
    HEADER
    + """
import time

def test_a_warm_and_hit():
    k.warmup(dtypes=("fp8",), causal=(True,))
    assert k.dispatch(1, "fp8", True) == 2

def test_b_slow():
    open("in-b", "w").close()
    time.sleep(60)

def test_c_serving_compile():
    assert k.dispatch(1, "fp8", False) == 2
"""
)


def test_a_session_interrupted_by_ctrl_c_is_incomplete_in_every_output(inner):
    """a11: Ctrl-C in the second of three tests; the third (a serving-path compile) never ran."""
    inner.makepyfile(test_int=SLOW)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *OBSERVE, "--mlacheck-run-dir=run", *OUTPUTS]
    session = subprocess.Popen(command, cwd=inner.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (inner.path / "in-b").exists():
        assert session.poll() is None and time.monotonic() < deadline, session.communicate()[0]
        time.sleep(0.05)
    session.send_signal(signal.SIGINT)
    output = session.communicate(timeout=120)[0]
    assert session.returncode == pytest.ExitCode.INTERRUPTED, output
    assert_incomplete_everywhere(inner.path, "the session stopped early, interrupted (Ctrl-C), after 1 of 3 test(s)")


def test_a_session_stopped_by_x_is_incomplete(inner):
    """-x after a failed test: the tests after it never ran, whatever the verdict of what did."""
    inner.makepyfile(
        test_x=CORRECT_WARMUP + "\n\ndef test_fails():\n    assert False\n\n\ndef test_never_runs():\n    pass\n"
    )
    result = run(inner, "-x", *OBSERVE, "--mlacheck-run-dir=run", *OUTPUTS)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.text
    assert_incomplete_everywhere(inner.path, "the session stopped early, -x or --maxfail: stopping after 1 failures")


def test_a_session_a_test_ends_with_os_exit_leaves_incomplete_outputs(inner):
    """a02: pytest's exit 0 cannot be changed; the output files, written at the session's start, say INCOMPLETE."""
    inner.makepyfile(test_exit=SERVING_COMPILE + "\n\ndef test_exits():\n    import os\n    os._exit(0)\n")
    result = run(inner, *OBSERVE, "--mlacheck-run-dir=run", *OUTPUTS)
    assert result.ret == 0, result.text
    report = assert_incomplete_everywhere(inner.path, "the session ended before mlacheck reported")
    assert report["exit_code"] == 2 and f"mlacheck report {inner.path / 'run'}" in report["incomplete"][0]


def test_a_clean_session_under_filterwarnings_error_passes(inner):
    """a13: the watcher's pipes are closed: no ResourceWarning turned into an error."""
    inner.makeini("[pytest]\nfilterwarnings =\n    error\n")
    inner.makepyfile(test_serving=CORRECT_WARMUP)
    result = run(inner, *OBSERVE, "--mlacheck-run-dir=run")
    assert result.ret == pytest.ExitCode.OK, result.text
    assert "ResourceWarning" not in result.text and "Unraisable" not in result.text
    assert line_starting(section(result), "verdict: ").startswith("verdict: PASS")
