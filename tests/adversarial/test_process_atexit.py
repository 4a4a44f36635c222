"""`atexit._run_exitfuncs()` called while the program runs on (red-team 16, break 5): autouse test fixtures call it
after each test to run what the test registered, restart-by-exec helpers call it before os.execv. The agent's own
atexit function runs then too, but the process is not ending: capture stays on (a serving-path compile after the call
is seen), the trace gets no exit event (a later kill -9 is not excused as a crash in the interpreter's teardown), the
real exit still stops capture, and the program's own atexit functions run exactly as they do without mlacheck."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.adversarial.conftest import ROOT, SYNTHETIC, assert_not_pass, assert_pass, observe, program
from tests.adversarial.test_program_ends_identity import SERVED, assert_unverified

MANUAL = {  # how the program runs its atexit functions mid-run
    "from the main thread": "atexit._run_exitfuncs()",
    "from another thread": "t = threading.Thread(target=atexit._run_exitfuncs); t.start(); t.join()",
}
LATE_COMPILE = textwrap.dedent(
    """
    import atexit, threading, mlacheck
    from tests.fixtures import synthetic_kernels as k
    k.warmup(dtypes=("fp8",), causal=(True,))
    mlacheck.serving_started()
    k.dispatch(1, "fp8", True)
    {manual}  # e.g. an autouse fixture's teardown after a test
    k.dispatch(1, "bf16", True)  # a serving-path compile
    print("compiled bf16 on the serving path", flush=True)
    """
)


@pytest.mark.parametrize("manual", list(MANUAL.values()), ids=list(MANUAL))
def test_a_serving_path_compile_after_a_manual_atexit_run_is_seen(tmp_path, manual):
    result = observe(tmp_path, sys.executable, program(tmp_path, LATE_COMPILE.format(manual=manual)))
    assert "compiled bf16 on the serving path" in result.stdout, result.stdout + result.stderr
    assert_not_pass(result, "fail")
    assert [f["key"]["dtype"] for f in result.report["findings"] if f["code"] == "MLA001"] == ["bf16"], result.report


AFTER_MAIN = textwrap.dedent(
    """
    import atexit, threading, time, mlacheck
    from tests.fixtures import synthetic_kernels as k
    k.warmup(dtypes=("fp8",), causal=(True,))
    mlacheck.serving_started()
    k.dispatch(1, "fp8", True)

    def later():  # runs on after the main thread's end (the interpreter's exit waits for it)
        time.sleep(0.5)
        atexit._run_exitfuncs()
        k.dispatch(1, "bf16", True)  # a serving-path compile
        print("compiled bf16 on the serving path", flush=True)

    threading.Thread(target=later).start()
    """
)


def test_a_thread_that_runs_atexit_after_the_main_thread_ended_is_still_seen(tmp_path):
    """The main thread has ended (threading stopped it, and the exit waits for the thread): atexit run by another
    thread is still no exit."""
    result = observe(tmp_path, sys.executable, program(tmp_path, AFTER_MAIN))
    assert "compiled bf16 on the serving path" in result.stdout, result.stdout + result.stderr
    assert_not_pass(result, "fail")
    assert [f["key"]["dtype"] for f in result.report["findings"] if f["code"] == "MLA001"] == ["bf16"], result.report


def test_a_worker_killed_after_a_manual_atexit_run_is_cut_short(tmp_path):
    """The worker serves fp8, runs its atexit functions, and is then killed from outside (the OOM killer's stand-in):
    its bf16 is unverified (INCOMPLETE), not a dead warm-up excused by an exit event the manual call wrote."""
    worker = SERVED + textwrap.dedent(
        """
        import atexit, os, subprocess
        atexit._run_exitfuncs()
        subprocess.run(["sh", "-c", f"kill -9 {os.getpid()}"])  # the OOM killer
        """
    )
    text = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {worker!r}])\n"
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert_unverified(result, "was killed by SIGKILL (no other observed process sent it")


OWN_FUNCTIONS = textwrap.dedent(
    """
    import atexit, mlacheck
    from tests.fixtures import synthetic_kernels as k
    k.warmup(dtypes=("fp8",), causal=(True,))
    mlacheck.serving_started()
    atexit.register(print, "first", flush=True)
    k.dispatch(1, "fp8", True)
    print("ran", atexit._run_exitfuncs(), flush=True)
    atexit.register(print, "second", flush=True)
    k.dispatch(1, "fp8", True)
    k.dispatch(1, "fp8", True)
    print("end", flush=True)
    """
)


def test_the_programs_atexit_functions_run_as_it_asked_and_the_real_exit_still_stops_capture(tmp_path):
    """What the program sees of atexit is what it sees without mlacheck (its functions run once each, when it asked);
    the real exit writes the final counts (every dispatch, exactly) and one exit event, last."""
    path = program(tmp_path, OWN_FUNCTIONS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLACHECK_RUN_DIR", None)
    plain = subprocess.run([sys.executable, path], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert plain.stdout == "first\nran None\nend\nsecond\n", plain.stdout + plain.stderr
    result = observe(tmp_path, sys.executable, path)
    assert result.stdout.startswith(plain.stdout), result.stdout + result.stderr
    assert_pass(result)
    [variant] = [v for family in result.report["families"] for v in family["variants"]]
    assert variant["dispatches"] == 3 and not variant.get("at_least"), variant
    [trace] = glob.glob(str(result.run_dir / "trace-*.jsonl"))
    with open(trace) as lines:
        kinds = [json.loads(line)["type"] for line in lines if line.strip()]
    assert kinds.count("exit") == 1 and kinds[-2:] == ["counts", "exit"], kinds


def test_a_manual_run_past_the_agents_wrapper_does_not_pass(tmp_path):
    """A program that calls the atexit module's own function, not the one the agent wraps (it took it before the agent
    started, or unwraps it): the agent's atexit function cannot be registered again after that call, so the real exit
    would not write the final counts; the run cannot pass, and the late compile is still seen."""
    manual = "run = atexit._run_exitfuncs; getattr(run, '__wrapped__', run)()"
    result = observe(tmp_path, sys.executable, program(tmp_path, LATE_COMPILE.format(manual=manual)))
    assert "compiled bf16 on the serving path" in result.stdout, result.stdout + result.stderr
    assert_not_pass(result)
    assert any("atexit" in reason for reason in result.report["incomplete"]), result.report["incomplete"]
    assert [f["key"]["dtype"] for f in result.report["findings"] if f["code"] == "MLA001"] == ["bf16"], result.report


CONFTEST = """
import atexit, pytest

@pytest.fixture(autouse=True)
def run_what_the_test_registered():  # (nearcore's conftest does this after each test)
    yield
    atexit._run_exitfuncs()
"""
TESTS = """
from tests.fixtures import synthetic_kernels as k

def test_1_warms_up():
    k.warmup(dtypes=("fp8",), causal=(True,))
    assert k.dispatch(1, "fp8", True) == 2

def test_2_compiles_on_the_serving_path():
    assert k.dispatch(1, "fp8", False) == 2
"""


def test_a_pytest_session_whose_fixture_runs_atexit_after_each_test_still_sees_the_next_test(tmp_path):
    """`pytest --mlacheck`: the agent in pytest's own process goes on through a fixture's atexit run."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_it.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLACHECK_RUN_DIR", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--mlacheck", f"--mlacheck-rules={SYNTHETIC}"]
        + [f"--mlacheck-run-dir={tmp_path / 'run'}", f"--mlacheck-output=json:{tmp_path / 'r.json'}", str(suite)],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "2 passed" in done.stdout, done.stdout + done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "fail" and done.returncode != 0, done.stdout + done.stderr
    assert [f["key"]["causal"] for f in report["findings"] if f["code"] == "MLA001"] == [False], report["findings"]
