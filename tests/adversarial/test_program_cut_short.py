"""A program that ends before its traffic may have ended (it exits non-zero, or a signal that is no stop kills it:
SIGKILL, SIGSEGV) never passes on what it did not reach: the warm-up it never dispatched is unverified, not dead
warm-up (MLA002 would tell the user to drop a variant the rest of the traffic may need), and the run is incomplete. A
stop someone asked for (a signal to mlacheck, forwarded, or SIGTERM, SIGINT or SIGHUP sent to the program itself: how
a server is ended) leaves the traffic they let run as the one judged: its never-dispatched warm-up is dead warm-up, as
after an exit 0."""

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mlacheck.program import ending
from tests.adversarial.conftest import ROOT, SYNTHETIC, assert_not_pass, observe, program, read_outputs

SERVED = textwrap.dedent(
    """
    import os, signal, sys, time
    import mlacheck
    from tests.fixtures import synthetic_kernels as k
    k.warmup(dtypes=("fp8", "bf16"), causal=(True,))
    mlacheck.serving_started()
    k.dispatch(1, "fp8", True)  # the traffic reaches fp8; bf16 would have come next
    """
)
ENDS = {
    "exit 3": ("sys.exit(3)\n", "the program exited 3"),
    "SIGKILL": ("os.kill(os.getpid(), signal.SIGKILL)\n", "the program was killed by SIGKILL"),
    "SIGSEGV": ("os.kill(os.getpid(), signal.SIGSEGV)\n", "the program was killed by SIGSEGV"),
}


def statuses(result) -> dict[str, str]:
    return {v["key"]["dtype"]: v["status"] for family in result.report["families"] for v in family["variants"]}


@pytest.mark.parametrize("end", ENDS)
def test_a_program_cut_short_leaves_its_undispatched_warmup_unverified_and_the_run_incomplete(tmp_path, end):
    text, why = ENDS[end]
    result = observe(tmp_path, sys.executable, program(tmp_path, SERVED + text))
    assert_not_pass(result, "incomplete")
    assert statuses(result) == {"fp8": "ok", "bf16": "unverified"}, statuses(result)
    assert not [f for f in result.report["findings"] if f["code"] == "MLA002"], result.report["findings"]
    [reason] = [reason for reason in result.report["incomplete"] if reason.startswith(why)]
    assert "1 precompiled variant(s) it never dispatched are unverified" in reason, reason


def test_a_program_that_launched_what_compile_skip_did_not_compile_is_told_why_it_was_cut_short(tmp_path):
    """--compile skip without --dry: a dispatch that launches a variant not compiled raises inside the program (a
    program under FakeTensorMode launches nothing, so the pair is not refused); the reason says so."""
    result = observe(tmp_path, sys.executable, program(tmp_path, SERVED), options=("--compile", "skip"))
    assert_not_pass(result, "incomplete")
    assert "cannot launch" in result.stderr and statuses(result)["bf16"] == "unverified", result.stderr
    [reason] = [reason for reason in result.report["incomplete"] if reason.startswith("the program exited 1")]
    assert "under --compile skip without --dry, a dispatch that launches a variant not compiled raises" in reason


def test_allow_incomplete_gives_a_cut_short_program_its_own_exit_status(tmp_path):
    result = observe(
        tmp_path, sys.executable, program(tmp_path, SERVED + "sys.exit(3)\n"), options=("--allow-incomplete",)
    )
    assert_not_pass(result, "incomplete", allow_incomplete=True)
    assert result.code == 3, result.stdout


def test_a_program_that_ends_well_keeps_its_dead_warmup(tmp_path):
    result = observe(tmp_path, sys.executable, program(tmp_path, SERVED))
    assert result.report["verdict"] == "pass" and result.report["incomplete"] == [], result.report["incomplete"]
    assert statuses(result) == {"fp8": "ok", "bf16": "dead warm-up"}
    assert [f["code"] for f in result.report["findings"]] == ["MLA002"]


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_server_the_user_stops_is_judged_on_the_traffic_it_served(tmp_path, signame):
    """The user's Ctrl-C (or a CI job's SIGTERM) to mlacheck, forwarded to the program, which dies by it."""
    text = SERVED + 'print("ready", flush=True)\ntime.sleep(60)\n'
    out = tmp_path / "out"
    out.mkdir()
    outputs = {fmt: out / f"report.{fmt}" for fmt in ("json", "junit", "sarif", "github")}
    args = [sys.executable, "-m", "mlacheck", "run", "--rules", SYNTHETIC, "--run-dir", str(tmp_path / "run")]
    for fmt, path in outputs.items():
        args += ["--output", f"{fmt}:{path}"]
    args += ["--", sys.executable, "-u", program(tmp_path, text)]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "160"}
    with subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
        assert run.stdout.readline() == "ready\n"
        time.sleep(0.5)
        run.send_signal(getattr(signal, signame))
        stdout, stderr = run.communicate(timeout=120)
    result = read_outputs(run.returncode, stdout, stderr, outputs, tmp_path / "run")
    assert result.report["program"]["signal"] == signame, result.report["program"]
    assert result.report["verdict"] == "pass" and result.report["incomplete"] == [], result.report["incomplete"]
    assert statuses(result) == {"fp8": "ok", "bf16": "dead warm-up"}
    assert result.code == 128 + getattr(signal, signame), (result.code, result.stdout)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_server_stopped_straight_by_a_stop_signal_is_judged_on_the_traffic_it_served(tmp_path, signame):
    """A CI job's `pkill -f serve.py`: a stop signal sent to the program itself, not through mlacheck."""
    stopper = f"import os, signal, sys, time\ntime.sleep(1)\nos.kill(int(sys.argv[1]), signal.{signame})\n"
    text = SERVED + (
        f"import subprocess\nsubprocess.Popen([sys.executable, {program(tmp_path, stopper, 'stop.py')!r}, "
        "str(os.getpid())])\ntime.sleep(60)\n"
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert result.report["program"]["signal"] == signame and not result.report["program"].get("forwarded")
    assert result.report["verdict"] == "pass" and result.report["incomplete"] == [], result.report["incomplete"]
    assert statuses(result) == {"fp8": "ok", "bf16": "dead warm-up"}


WORKER = """
import multiprocessing, os, signal, subprocess, sys
SERVED = {served!r}
def serve():
    exec(SERVED + {end!r})
if __name__ == "__main__":
    {start}
    print("the worker ended", flush=True)  # the program goes on and exits 0
"""
STARTS = {
    "subprocess": "subprocess.run([sys.executable, '-c', 'exec(' + repr(SERVED + {end!r}) + ')'])",
    "spawn": "worker = multiprocessing.get_context('spawn').Process(target=serve); worker.start(); worker.join()",
    "fork": "worker = multiprocessing.get_context('fork').Process(target=serve); worker.start(); worker.join()",
    "faulthandler": "subprocess.run([sys.executable, '-X', 'faulthandler', '-c', 'exec(' + repr(SERVED + {end!r}) + ')'])",
    "killed by its parent": (  # as an engine ends a worker (SGLang's kill_process_tree: psutil, os.kill)
        "worker = subprocess.Popen([sys.executable, '-c', 'exec(' + repr(SERVED + {end!r}) + ')'], "
        "stdout=subprocess.PIPE); worker.stdout.readline(); os.kill(worker.pid, signal.SIGKILL); worker.wait()"
    ),
    "its group killed by its parent": (
        "worker = subprocess.Popen([sys.executable, '-c', 'exec(' + repr(SERVED + {end!r}) + ')'], "
        "stdout=subprocess.PIPE, start_new_session=True); worker.stdout.readline(); "
        "os.killpg(worker.pid, signal.SIGKILL); worker.wait()"
    ),
}
SERVING = "print('served', flush=True)\nimport time; time.sleep(60)\n"  # until its parent ends it
WORKER_ENDS = {  # how a worker ends before its traffic may have, while the program's main process exits 0
    "SIGSEGV": ("subprocess", "os.kill(os.getpid(), signal.SIGSEGV)\n", "was killed by SIGSEGV"),
    "abort": ("subprocess", "os.abort()\n", "was killed by SIGABRT"),
    "a fatal error": (
        "subprocess",
        "import ctypes; ctypes.pythonapi.Py_FatalError(b'lost')\n",
        "was killed by SIGABRT",
    ),
    "SIGUSR1": ("subprocess", "os.kill(os.getpid(), signal.SIGUSR1)\n", "was killed by SIGUSR1"),
    "SIGTRAP": ("subprocess", "os.kill(os.getpid(), signal.SIGTRAP)\n", "was killed by SIGTRAP"),
    "a real-time signal": ("subprocess", "os.kill(os.getpid(), signal.SIGRTMIN)\n", "was killed by SIGRTMIN"),
    "a stack overflow": (  # (CPython's own helper: from 3.12 a deep repr raises RecursionError, no overflow)
        "subprocess",
        "import faulthandler\nfaulthandler._stack_overflow()\n",
        "was killed by SIGSEGV",
    ),
    "closes its descriptors, then SIGSEGV": (
        "subprocess",
        "os.closerange(3, 65536); os.kill(os.getpid(), signal.SIGSEGV)\n",
        "was killed by SIGSEGV",
    ),
    "exit 3": ("subprocess", "sys.exit(3)\n", "exited 3"),
    "raise SystemExit(3)": ("subprocess", "raise SystemExit(3)\n", "exited 3"),
    "raises (spawn)": ("spawn", "raise RuntimeError('lost its device')\n", "exited 1"),
    "raises (fork)": ("fork", "raise RuntimeError('lost its device')\n", "exited 1"),
    "an uncaught exception": ("subprocess", "raise RuntimeError('lost its device')\n", "exited 1"),
    # ends that only its parent's reap tells (red-team): SIGKILL that no observed process sent (the OOM killer, a
    # kill -9), os._exit, a fault under faulthandler's handler installed before mlacheck's
    "SIGKILL, by itself": ("subprocess", "os.kill(os.getpid(), signal.SIGKILL)\n", "was killed by SIGKILL"),
    "SIGKILL from outside (kill -9)": (
        "subprocess",
        "import subprocess; subprocess.run(['sh', '-c', f'kill -9 {os.getpid()}'])\n",
        "was killed by SIGKILL",
    ),
    "os._exit(1)": ("subprocess", "os._exit(1)\n", "exited 1"),
    "SIGSEGV under faulthandler": ("faulthandler", "os.kill(os.getpid(), signal.SIGSEGV)\n", "was killed by SIGSEGV"),
}


def worker_program(tmp_path, start: str, end: str) -> str:
    text = WORKER.format(served=SERVED, end=end, start=STARTS[start].format(end=end))
    return program(tmp_path, text)


@pytest.mark.skipif(ending._ending is None, reason="mlacheck.program._ending was not built (no C compiler or glibc)")
@pytest.mark.parametrize("end", WORKER_ENDS)
def test_a_worker_cut_short_while_the_program_exits_0_leaves_its_warmup_unverified(tmp_path, end):
    start, text, why = WORKER_ENDS[end]
    result = observe(tmp_path, sys.executable, worker_program(tmp_path, start, text))
    assert result.report["program"]["exit_code"] == 0 and "the worker ended" in result.stdout, result.stdout
    assert_not_pass(result, "incomplete")
    assert statuses(result) == {"fp8": "ok", "bf16": "unverified"}, statuses(result)
    [reason] = [reason for reason in result.report["incomplete"] if why in reason]
    assert reason.startswith("pid ") and "1 precompiled variant(s) it never dispatched are unverified" in reason
    assert "cut short" in {row["status"] for row in result.report["ranks"]}, result.report["ranks"]


WELL_ENDED = {  # no crash: how engines end their workers, a status that says a stop, a crash in the teardown
    "SIGKILL from its parent": ("killed by its parent", SERVING),
    "SIGKILL to its process group from its parent": ("its group killed by its parent", SERVING),
    "exit 0": ("subprocess", "sys.exit(0)\n"),
    "os._exit(0)": ("subprocess", "os._exit(0)\n"),
    "exit 256 (status 0)": ("subprocess", "sys.exit(256)\n"),
    "exit 143 from its SIGTERM handler": ("subprocess", "sys.exit(128 + signal.SIGTERM)\n"),
    "exit 120: its teardown's flush failed": ("subprocess", "sys.stdout.write('unflushed'); os.close(1)\n"),
    "SIGSEGV after its exit event": (
        "subprocess",
        "class Teardown:\n    def __del__(self):\n        os.kill(os.getpid(), signal.SIGSEGV)\nleft = Teardown()\n",
    ),
}


@pytest.mark.parametrize("end", WELL_ENDED)
def test_a_worker_killed_or_ended_well_keeps_its_dead_warmup(tmp_path, end):
    """Engines end their workers with SIGKILL (SGLang's kill_process_tree: psutil's kill, an os.kill): that is no
    crash where an observed process sent it; nor a status of 0, one that says a stop, or a crash once the traffic has
    ended (the interpreter's teardown, after the exit event)."""
    result = observe(tmp_path, sys.executable, worker_program(tmp_path, *WELL_ENDED[end]))
    assert result.report["verdict"] == "pass" and result.report["incomplete"] == [], result.report["incomplete"]
    assert statuses(result) == {"fp8": "ok", "bf16": "dead warm-up"}


def test_the_workers_beside_one_that_crashed_leave_their_warmup_unverified(tmp_path):
    """torchrun, process pools: one worker crashes, its launcher stops the others (SIGTERM, SIGKILL) or a replacement
    serves on and ends well, and the program exits 0. The traffic lost with the crash may have been theirs next: no
    MLA002 for them (red-team: a restarted torchrun group, a broken pool, a pool that replaced a killed worker)."""
    waiting = "print('served', flush=True)\nsys.stdin.readline()\n"  # until its parent ends it
    text = WORKER.format(served=SERVED, end="", start="pass") + textwrap.dedent(
        f"""
        peers = [
            subprocess.Popen([sys.executable, '-c', SERVED + {waiting!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            for _ in range(3)
        ]
        for peer in peers:
            peer.stdout.readline()
        subprocess.run([sys.executable, '-c', SERVED + 'os.kill(os.getpid(), signal.SIGSEGV)'])
        os.kill(peers[0].pid, signal.SIGTERM)
        os.kill(peers[1].pid, signal.SIGKILL)
        peers[2].stdin.close()  # a replacement that serves on and ends well
        for peer in peers:
            peer.wait()
        """
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert result.report["program"]["exit_code"] == 0, result.stdout + result.stderr
    assert_not_pass(result, "incomplete")
    assert statuses(result) == {"fp8": "ok", "bf16": "unverified"}, statuses(result)
    assert not [f for f in result.report["findings"] if f["code"] == "MLA002"], result.report["findings"]
    beside = [reason for reason in result.report["incomplete"] if "shared its run with pid" in reason]
    assert len(beside) == 3 and all("1 precompiled variant(s)" in reason for reason in beside), beside


def test_a_child_forked_and_execd_below_python_ended_no_traffic(tmp_path):
    """subprocess with a preexec_fn runs Python's fork hooks in the child, not its exec hooks: the child's Python image
    (the parent's warm cache, inherited) ends in the exec, with no exit event; what then ends (here by a SIGKILL) is
    another program. Ray starts its GCS and raylet so, and ends them so: no end to judge (it read as a kill from
    outside, INCOMPLETE)."""
    text = SERVED + "import subprocess\nsubprocess.run(['sh', '-c', 'kill -9 $$'], preexec_fn=lambda: None)\n"
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert len(result.report["processes"]) == 2, result.report["processes"]  # the parent, and its child's image
    assert result.report["verdict"] == "pass" and result.report["incomplete"] == [], result.report["incomplete"]
    assert [f["code"] for f in result.report["findings"]] == ["MLA002"]  # the parent's bf16: dead warm-up


def test_a_worker_left_running_that_mlacheck_ends_leaves_its_warmup_unverified(tmp_path):
    """A launcher that starts a server in a session of its own and exits 0: mlacheck ends the server after its grace;
    the bf16 traffic would have come later."""
    server = SERVED + "time.sleep(30)\nk.dispatch(1, 'bf16', True)\n"
    text = (
        f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {server!r}], start_new_session=True)\n"
        "time.sleep(1)\n"
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    [left] = result.report["program"]["left_behind"]
    assert_not_pass(result, "incomplete")
    assert statuses(result) == {"fp8": "ok", "bf16": "unverified"}, statuses(result)
    [reason] = [r for r in result.report["incomplete"] if "left running when the program exited" in r]
    assert reason.startswith(f"pid {left['pid']}, left running when the program exited, was ended by mlacheck")


def test_observing_a_worker_changes_neither_its_status_nor_what_it_prints(tmp_path):
    """How a process ends is watched where it changes nothing: the same statuses and output, observed or not, the
    same signal actions and functions as the program sees them."""
    text = (
        "import faulthandler, os, pickle, signal, subprocess, sys\n"
        "print('sees', signal.getsignal(signal.SIGUSR1), faulthandler.is_enabled(), len(pickle.dumps(sys.exit)),\n"
        "      type(sys.exit).__name__, type(os._exit).__name__, flush=True)\n"
        "print('pickled', [pickle.loads(pickle.dumps(f)) is f for f in (os.kill, os.killpg, os.waitpid, os.wait4)])\n"
        "for call in (lambda: os.kill('1', 0), lambda: os.killpg(None, 9), lambda: os.waitpid('1', 0)):\n"
        "    try:\n        call()\n    except Exception as exc:\n        print('refused', type(exc).__name__, exc)\n"
        "codes = [subprocess.run([sys.executable, '-c', c]).returncode for c in (\n"
        "    'import sys; sys.exit(3)', 'import sys; sys.exit(\"a message\")', 'import os; os.abort()',\n"
        "    'import os, signal; os.kill(os.getpid(), signal.SIGUSR1)', 'raise SystemExit(256)',\n"
        "    'import faulthandler, os; faulthandler.enable(); os.abort()')]\n"
        "import resource\n"
        "no_room = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # no note of its size can be written\n"
        "codes.append(subprocess.run([sys.executable, '-c', 'pass'], preexec_fn=no_room).returncode)\n"
        "print('codes', codes, flush=True)\n"
    )
    path = program(tmp_path, text)
    plain = subprocess.run([sys.executable, path], capture_output=True, text=True, cwd=ROOT)
    result = observe(tmp_path, sys.executable, path)
    printed = [line for line in plain.stdout.splitlines() if line.startswith(("sees", "pickled", "refused", "codes"))]
    assert printed[1] == "pickled [True, True, True, True]" and printed[-1] == "codes [3, 1, -6, -10, 0, -6, 0]"
    assert len(printed) == 6 and all(line.startswith("refused TypeError") for line in printed[2:5]), plain.stdout
    assert " False " in printed[0], plain.stdout
    assert [
        line for line in result.stdout.splitlines() if line.startswith(("sees", "pickled", "refused", "codes"))
    ] == (printed)
    for expected in ("a message", "Fatal Python error: Aborted"):
        assert plain.stderr.count(expected) == result.stderr.count(expected) == 1, (expected, result.stderr)
