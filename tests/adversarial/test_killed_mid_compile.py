"""A process that dies in a serving-path compile leaves it behind (`compile_start`, written before every compile): the
watchdog case of the README (a worker stalled in a compile, killed by its engine's watchdog), with SIGKILL and SIGTERM,
a watchdog thread that os._exit()s, and a daemon thread still compiling when main returns. Each ends FAIL, never PASS;
each control (nothing killed) ends as before: FAIL with the compile timed."""

import re
import shutil
import signal
import sys

import pytest

from mlacheck.rulefiles import BUNDLED
from tests.adversarial.conftest import ROOT, assert_not_pass, observe, program

SERVING = (
    "from tests.fixtures import synthetic_kernels as k\n"
    "import mlacheck\n"
    "k.warmup(dtypes=('fp8',), causal=(True,))\n"
    "mlacheck.serving_started()\n"
    "for _ in range(100):\n"
    "    k.dispatch(1)\n"
    "k.COMPILE_SECONDS = 3.0\n"
)
"""A warmed-up worker serves its warm variant, then the next dispatch, (bf16, True), compiles for 3 s."""

WATCHDOG = f"""
import multiprocessing, os, signal, sys, time


def worker(ready):
{"".join("    " + line + chr(10) for line in SERVING.splitlines())}    ready.set()
    k.dispatch(1, "bf16")


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    ready = multiprocessing.Event()
    stalled = multiprocessing.Process(target=worker, args=(ready,))
    stalled.start()
    assert ready.wait(120)
    time.sleep(0.5)
    if sys.argv[1] != "none":
        os.kill(stalled.pid, getattr(signal, sys.argv[1]))  # the engine's watchdog: a worker stalled past its limit
    stalled.join()
    print("watchdog: worker exit code", stalled.exitcode)
"""


def serving_path_compiles(result) -> list[dict]:
    return [f for f in result.report["findings"] if f["code"] == "MLA001" and f["family"] == "synthetic"]


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_a_worker_killed_by_its_watchdog_in_a_serving_path_compile_fails(tmp_path, signal_name):
    result = observe(tmp_path, sys.executable, program(tmp_path, WATCHDOG), signal_name)
    assert f"worker exit code -{getattr(signal, signal_name).value}" in result.stdout
    assert_not_pass(result, "fail")
    [finding] = serving_path_compiles(result)
    assert "never ended" in finding["message"] and "at least" in finding["message"]
    assert finding["site"].endswith("program.py:14")  # the worker's own dispatch call


def test_the_watchdog_control_fails_with_the_compile_timed(tmp_path):
    result = observe(tmp_path, sys.executable, program(tmp_path, WATCHDOG), "none")
    assert "worker exit code 0" in result.stdout
    assert_not_pass(result, "fail")
    [finding] = serving_path_compiles(result)
    assert finding["key"] == {"dtype": "bf16", "causal": True} and "a 3.0 s stall" in finding["message"]


KILLED_IN_IT = (
    "import os, signal, threading\n"
    + SERVING
    + "threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()\n"
    "k.dispatch(1, 'bf16')\n"
)
"""Killed 1 s into a serving-path compile, with nothing recorded after the compile began."""


def test_a_stall_its_process_was_killed_in_is_never_said_to_be_zero_seconds(tmp_path):
    result = observe(tmp_path, sys.executable, program(tmp_path, KILLED_IN_IT))
    assert_not_pass(result, "fail")
    [finding] = serving_path_compiles(result)
    shown = [line for line in result.stdout.splitlines() if "serving-path compile" in line]
    said = "\n".join([finding["summary"], finding["message"], *shown])
    assert "0.0 s" not in said, said
    measured = re.match(r"≥(\d+\.\d) s serving-path compile, never finished$", finding["summary"])
    assert finding["summary"] == "serving-path compile, never finished (stall not measured)" or (
        measured and float(measured[1]) > 0
    ), finding["summary"]


EXIT_THREAD = (
    "import os, threading, time\n" + SERVING + "def watchdog():\n"
    "    time.sleep(0.5)\n"
    "    os._exit(0)  # a stall watchdog that ends the process itself\n"
    "threading.Thread(target=watchdog, daemon=True).start()\n"
    "k.dispatch(1, 'bf16')\n"
)


def test_a_watchdog_thread_that_os_exits_mid_compile_fails(tmp_path):
    result = observe(tmp_path, sys.executable, program(tmp_path, EXIT_THREAD))
    assert result.report["program"]["exit_code"] == 0
    assert_not_pass(result, "fail")
    [finding] = serving_path_compiles(result)
    assert "the process died in it" in finding["message"]


DAEMON = (
    "import threading, time\n"
    + SERVING
    + "threading.Thread(target=k.dispatch, args=(1, 'bf16'), daemon=True).start()\n"
    "time.sleep(0.5)  # main returns while the daemon thread still compiles\n"
)


def test_a_daemon_thread_still_compiling_when_main_returns_fails(tmp_path):
    result = observe(tmp_path, sys.executable, program(tmp_path, DAEMON))
    assert_not_pass(result, "fail")
    [finding] = serving_path_compiles(result)
    assert "the process was still in it when it exited" in finding["message"]


def test_the_daemon_control_fails_with_the_compile_timed(tmp_path):
    text = DAEMON.replace("daemon=True).start()", "daemon=True)\nthread.start()\nthread.join()").replace(
        "threading.Thread(", "thread = threading.Thread("
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert_not_pass(result, "fail")
    [finding] = serving_path_compiles(result)
    assert "a 3.0 s stall" in finding["message"] and "never ended" not in finding["message"]


WARM_UP_KILLED = (
    "import os, signal, threading, time\n"
    "from tests.fixtures import synthetic_kernels as k\n"
    "k.COMPILE_SECONDS = 3.0\n"
    "threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()\n"
    "k.warmup(dtypes=('fp8',), causal=(True,))\n"
)


def test_a_process_killed_in_a_warm_up_compile_is_incomplete(tmp_path):
    result = observe(tmp_path, sys.executable, program(tmp_path, WARM_UP_KILLED))
    assert_not_pass(result, "incomplete")
    assert any("synthetic (warmup)" in line and "never ended" in line for line in result.report["incomplete"])


RETURNED_THEN_KILLED = (
    "import signal\n"
    "import mlacheck\n"
    "from tests.fixtures import synthetic_kernels as k\n"
    "k.warmup(dtypes=('fp8',), causal=(True,))\n"
    "k.dispatch(1)\n"
    "{serving}"
    "kernel = k.compile_variant('bf16', True)  # a watched compile that returned, not in the cache yet\n"
    "{kill}  # killed before its record\n"
)
"""A compile that returned and a process killed before its record: by a signal it raises itself, no line written
between (trace format 4 holds the compile's end for its record: none is written), or by `os.kill`, whose `kill`
event writes the held end first."""
KILLS = ["signal.raise_signal(signal.SIGKILL)", "__import__('os').kill(__import__('os').getpid(), signal.SIGKILL)"]


@pytest.mark.parametrize("kill", KILLS)
def test_a_process_killed_after_a_warm_up_compile_returned_and_before_its_record_is_incomplete(tmp_path, kill):
    result = observe(tmp_path, sys.executable, program(tmp_path, RETURNED_THEN_KILLED.format(serving="", kill=kill)))
    assert_not_pass(result, "incomplete")
    [line] = result.report["incomplete"]
    assert "a compile of synthetic (warmup)" in line and "the process died" in line, line


@pytest.mark.parametrize("kill", KILLS)
def test_a_process_killed_after_a_serving_path_compile_returned_and_before_its_record_fails(tmp_path, kill):
    text = RETURNED_THEN_KILLED.format(serving="mlacheck.serving_started()\n", kill=kill)
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert_not_pass(result, "fail")
    [finding] = serving_path_compiles(result)
    assert "began on the serving path" in finding["message"], finding["message"]


SERVED_ON = (
    "import signal, time\n"
    "import mlacheck\n"
    "from tests.fixtures import synthetic_kernels as k\n"
    "k.warmup(dtypes=('fp8',), causal=(True,))\n"
    "mlacheck.serving_started()\n"
    "k.dispatch(1)  # its serving dispatch event written: the loop below writes no line\n"
    "kernel = k.compile_variant('bf16', True)  # a watched compile that returned, never put in the cache\n"
    "deadline = time.monotonic() + 6.0  # past the 5 s counts checkpoint, dispatching a variant it knew (no line)\n"
    "while time.monotonic() < deadline:\n"
    "    k.dispatch(1)\n"
    "signal.raise_signal(signal.SIGKILL)\n"
)


def test_a_compile_that_returned_long_before_its_process_was_killed_is_said_to_have_ended(tmp_path):
    """The end a trace holds for the compile's record is written by the next counts checkpoint: the finding measures
    the compile as it ran, never a stall it died in."""
    result = observe(tmp_path, sys.executable, program(tmp_path, SERVED_ON))
    assert_not_pass(result, "fail")
    [finding] = serving_path_compiles(result)
    assert "began on the serving path and compiled" in finding["message"], finding["message"]
    assert finding["summary"].endswith("serving-path compile, its variant not recorded"), finding["summary"]


REAL_WATCHDOG = """
import multiprocessing, os, signal, sys, time

from tests.fixtures import watchdog_decode

if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    serving = multiprocessing.Event()
    worker = multiprocessing.Process(target=watchdog_decode.serve, args=(serving,))
    worker.start()
    assert serving.wait(600)
    if sys.argv[1] != "none":
        time.sleep(float(sys.argv[1]))
        os.kill(worker.pid, signal.SIGKILL)  # the watchdog: the worker stalled in its first eager batch
    worker.join()
    print("watchdog: worker exit code", worker.exitcode)
"""


@pytest.fixture
def decode_rules(tmp_path):
    """The bundled rules plus the worker's capture frame."""
    folder = tmp_path / "rules"
    folder.mkdir()
    for path in [*BUNDLED.glob("*.toml"), ROOT / "tests" / "fixtures" / "watchdog_decode.toml"]:
        shutil.copy(path, folder)
    return str(folder)


@pytest.mark.compile
def test_the_readmes_watchdog_case_on_the_real_tokenspeed_mla_decode_fails(tmp_path, decode_rules):
    """A spawned worker captures batch 1, then is SIGKILLed 0.6 s into its eager batch 40's compile (real sm_100a
    code, cross-compiled on the CPU under --dry): the compile it died in is the serving-path compile, named by its
    key and the captured variant it differs from."""
    result = observe(
        tmp_path / "killed",
        sys.executable,
        program(tmp_path, REAL_WATCHDOG),
        "0.6",
        rules=decode_rules,
        options=("--dry", "--context", "num_heads=128", "--context", "kv_cache_dtype=float8_e4m3fn"),
    )
    assert "worker exit code -9" in result.stdout
    assert_not_pass(result, "fail")
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert finding["family"] == "tokenspeed_mla.decode" and "never ended" in finding["message"]
    assert set(finding["diff"]) <= {"is_workspace_size_zero", "reducer_d_tiles", "reducer_max_splits"}
    assert finding["diff"] and finding["site"].endswith("watchdog_decode.py:15")


@pytest.mark.compile
def test_the_readmes_watchdog_control_fails_with_the_compile_timed(tmp_path, decode_rules):
    result = observe(
        tmp_path / "served",
        sys.executable,
        program(tmp_path, REAL_WATCHDOG),
        "none",
        rules=decode_rules,
        options=("--dry", "--context", "num_heads=128", "--context", "kv_cache_dtype=float8_e4m3fn"),
    )
    assert "worker exit code 0" in result.stdout
    assert_not_pass(result, "fail")
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert finding["family"] == "tokenspeed_mla.decode" and "never ended" not in finding["message"]
    assert set(finding["diff"]) <= {"is_workspace_size_zero", "reducer_d_tiles", "reducer_max_splits"}


NETTED = """
import os, signal, sys, threading
sys.path.insert(0, "tests/fixtures")
import synthetic_jit_dir as library
import mlacheck

mlacheck.serving_started()
if sys.argv[1] == "SIGKILL":  # the engine's watchdog: the request stalled in a build past its limit
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
library.transform(library.Array(300, 8))  # a kernel no rule keys (DeepGEMM's layout kernels): netted
print("the netted call returned")
"""


@pytest.mark.parametrize("signal_name", ["SIGKILL", "none"])
def test_a_process_killed_in_a_netted_native_build_on_the_serving_path_fails(tmp_path, signal_name):
    """A jit_dir library's operation that no rule keys (capture/caches/jit_net.py) writes its compile_start before the
    call: killed inside the build, the compile is still named (MLA007, never ended); the control, with its time."""
    result = observe(
        tmp_path, sys.executable, program(tmp_path, NETTED), signal_name,
        rules=str(ROOT / "tests" / "fixtures" / "synthetic_jit_dir.toml"),
        env={"SYNTHETIC_JIT_DIR": str(tmp_path / "jit"), "SYNTHETIC_JIT_BUILD_SECONDS": "3"},
    )  # fmt: skip
    assert ("the netted call returned" in result.stdout) == (signal_name == "none"), result.stdout
    assert_not_pass(result, "fail")
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA007"]
    assert finding["family"] == "unwatched:synthetic_jit_dir._native.layout"
    if signal_name == "SIGKILL":
        assert "never ended" in finding["message"] and "at least" in finding["message"]
    else:
        assert "a 3.0 s stall" in finding["message"] and finding["key"] == {"sf": "fp8[300, 8]"}
