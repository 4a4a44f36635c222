"""A worker's end is credited only to that worker, not to another process of its pid or to its old group (red-team 14,
breaks 2 to 4): a worker forked into the pid of a command its parent ran earlier is judged (no exec child of it), a
reap or a SIGKILL of a later command that took a dead worker's pid is not read as the worker's end, and a SIGKILL to
the group the worker left is not read as its engine ending it. Each worker serves fp8, never bf16, and is then killed
from outside (a shell's kill -9, the OOM killer's stand-in): its bf16 stays unverified and the run INCOMPLETE, never a
PASS with MLA002 (dead warm-up). The reuses are real, in a pid namespace of the test's own (ns_last_pid), as in
test_process_pid_reuse.py."""

import sys
import textwrap

import pytest

from tests.adversarial.conftest import assert_not_pass, observe, observe_wrapped, program
from tests.adversarial.test_process_pid_reuse import NAMESPACE, pid_namespace

SERVED = textwrap.dedent(
    """
    import mlacheck
    from tests.fixtures import synthetic_kernels as k
    k.warmup(dtypes=("fp8", "bf16"), causal=(True,))
    mlacheck.serving_started()
    k.dispatch(1, "fp8", True)  # the traffic reaches fp8; bf16 would have come next
    """
)
TAKE_NEXT = """
def take_next(pid):  # the next process of the namespace takes `pid`
    with open("/proc/sys/kernel/ns_last_pid", "w") as last:
        last.write(str(pid - 1))
"""

FORKED_INTO_A_SPAWNS_PID = (
    "import os, subprocess\n"
    + TAKE_NEXT
    + """
first = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True)  # a command the program ran
take_next(int(first.stdout))
worker = os.fork()
if worker == 0:
{served}
    subprocess.run(["sh", "-c", f"kill -9 {{os.getpid()}}"])  # the OOM killer
    os._exit(0)
os.waitpid(worker, 0)
print("reused", worker == int(first.stdout), flush=True)
"""
)

WORKER = (
    SERVED
    + 'import os, subprocess\nprint(os.getpid(), flush=True)\nsubprocess.run(["sh", "-c", f"kill -9 {os.getpid()}"])\n'
)
LATER_IN_A_WORKERS_PID = (
    "import os, signal, subprocess, sys\n"
    + TAKE_NEXT
    + """
# a launcher script (not Python) runs the worker and reaps it: no reap of it is written
launched = subprocess.run(["sh", "-c", '"$0" -c "$1"', sys.executable, {worker!r}], capture_output=True, text=True)
freed = int(launched.stdout.split()[0])
take_next(freed)
later = subprocess.Popen(["sleep", "30"] if {kill} else ["true"])  # a command in the dead worker's pid
if {kill}:
    os.kill(later.pid, signal.SIGKILL)  # the program ends its command: a `kill` event of that pid
later.wait()  # its reap: a `reaped` event of that pid, by the program
print("reused", later.pid == freed, flush=True)
"""
)


def observe_in_namespace(tmp_path, text: str):
    pid_namespace()
    result = observe_wrapped(tmp_path, NAMESPACE, [sys.executable, program(tmp_path, text)], tmp_path / "run", {})
    assert "reused True" in result.stdout, f"the pid was not reused (the namespace forked): {result.stdout}"
    return result


def assert_unverified(result, why: str) -> None:
    """The worker's bf16 is unverified, not dead warm-up, and the run INCOMPLETE because the worker was cut short."""
    assert_not_pass(result, "incomplete")
    statuses = {v["key"]["dtype"]: v["status"] for family in result.report["families"] for v in family["variants"]}
    assert statuses == {"fp8": "ok", "bf16": "unverified"}, statuses
    assert not [f for f in result.report["findings"] if f["code"] == "MLA002"], result.report["findings"]
    [reason] = [reason for reason in result.report["incomplete"] if why in reason]
    assert "1 precompiled variant(s) it never dispatched are unverified" in reason, reason


def test_a_worker_forked_into_the_pid_of_a_command_spawned_earlier_is_judged(tmp_path):
    """The program ran `sh -c 'echo $$'` through subprocess, then forked a worker that took that pid: the worker is no
    Python image of that spawn (an exec child, whose end is not judged), though its pid and its parent match."""
    text = FORKED_INTO_A_SPAWNS_PID.format(served=textwrap.indent(SERVED, "    "))
    assert_unverified(observe_in_namespace(tmp_path, text), "was killed by SIGKILL (no other observed process sent it")


@pytest.mark.parametrize("kill", [False, True], ids=["its reap, exit 0", "its SIGKILL by the program"])
def test_a_command_that_took_a_dead_workers_pid_does_not_end_the_worker(tmp_path, kill):
    """A worker whose launcher is no Python (no reap of it written) is killed from outside; a later command of the
    program takes its pid, and the program reaps it (exit 0), or SIGKILLs it first. Neither is the worker's end: the
    reaper is not the worker's parent, and the kill reached another process of that pid."""
    text = LATER_IN_A_WORKERS_PID.format(worker=WORKER, kill=kill)
    assert_unverified(observe_in_namespace(tmp_path, text), "ended with no record of how")


LEFT_ITS_GROUP = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    worker = 'import os, time\\nos.setsid()\\n' + {served!r} + 'print(os.getpid(), flush=True)\\ntime.sleep(60)\\n'
    launcher = 'import subprocess, sys\\nsubprocess.run([sys.executable, "-c", ' + repr(worker) + '])\\n'
    started = subprocess.Popen([sys.executable, "-c", launcher], start_new_session=True, stdout=subprocess.PIPE)
    pid = int(started.stdout.readline())  # the worker, in a session of its own (its run event named the group)
    os.killpg(started.pid, signal.SIGKILL)  # the engine ends its launcher's group: the worker is no longer in it
    started.wait()
    print("alive after the group kill", os.path.exists(f"/proc/{{pid}}"), flush=True)
    subprocess.run(["sh", "-c", f"kill -9 {{pid}}"])  # the OOM killer
    """
)


def test_a_sigkill_to_the_group_a_worker_left_does_not_end_the_worker(tmp_path):
    """The worker's run event names its launcher's group; then it calls os.setsid() (a daemonizing server). The
    program's SIGKILL to that group does not reach it (it runs on), so the later kill -9 is from outside."""
    result = observe(tmp_path, sys.executable, program(tmp_path, LEFT_ITS_GROUP.format(served=SERVED)))
    assert "alive after the group kill True" in result.stdout, result.stdout + result.stderr
    assert_unverified(result, "(no other observed process sent it")


STOPPED_LATER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    worker = {served!r} + 'import os, subprocess\\nsubprocess.run(["sh", "-c", f"kill -9 {{os.getpid()}}"])\\n'
    subprocess.run([sys.executable, "-c", worker])  # killed from outside (the OOM killer); the program reaps it
    if {stop!r} == "itself":
        os.kill(os.getpid(), signal.SIGTERM)  # the launcher ends itself with a stop on shutdown
    elif {stop!r} == "from outside":
        subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -TERM {{os.getpid()}}"])  # a CI step's pkill -f serve.py
    else:
        os.kill(os.getppid(), signal.SIGTERM)  # a CI job's SIGTERM to mlacheck, forwarded to the program
    time.sleep(30)
    """
)


@pytest.mark.parametrize("stop", ["itself", "from outside", "through mlacheck"])
def test_a_stop_of_the_program_does_not_excuse_a_worker_killed_before_it(tmp_path, stop):
    """Red-team 16 #1: a worker is SIGKILLed from outside and reaped by the program, which is stopped later. A stop
    ends the traffic it lets run, not the traffic an OOM kill had cut short before it was asked."""
    text = STOPPED_LATER.format(served=SERVED, stop=stop)
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert result.report["program"]["signal"] == "SIGTERM", result.report["program"]
    assert_unverified(result, "was killed by SIGKILL (no other observed process sent it")


REAPED_UNSEEN = (
    "import ctypes, os, signal, subprocess, time\n"
    + TAKE_NEXT
    + """
libc = ctypes.CDLL(None, use_errno=True)
ready, told = os.pipe()
worker = os.fork()
if worker == 0:
{served}
    os.write(told, b"x")
    time.sleep(60)
os.read(ready, 1)
if {how!r} == "libc":
    libc.kill(worker, signal.SIGKILL)  # the OOM killer
    libc.waitpid(worker, ctypes.byref(ctypes.c_int()), 0)  # reaped below Python: no reap event
else:  # SIGCHLD ignored for a while (a daemon's habit): the kernel reaps the worker
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    libc.kill(worker, signal.SIGKILL)
    while os.path.exists(f"/proc/{{worker}}"):
        time.sleep(0.01)
    time.sleep(0.05)  # (until the kernel has freed its pid)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
take_next(worker)
later = subprocess.Popen(["true"])  # a command in the dead worker's pid
later.wait()  # its reap by the worker's parent: exit 0
print("reused", later.pid == worker, flush=True)
"""
)


@pytest.mark.parametrize("how", ["libc", "SIG_IGN"])
def test_the_reap_of_a_later_child_in_a_workers_pid_does_not_end_the_worker(tmp_path, how):
    """Red-team 16 #3: the worker's parent reaps it unseen (libc waitpid; SIGCHLD ignored), then a command it runs
    takes the pid, and the parent reaps that (exit 0). A reap names the child it reaped by its start too: the later
    command's is not the worker's end."""
    text = REAPED_UNSEEN.format(served=textwrap.indent(SERVED, "    "), how=how)
    assert_unverified(observe_in_namespace(tmp_path, text), "ended with no record of how")


HIDDEN_IMAGE = (
    "import os, subprocess, sys\n"
    + TAKE_NEXT
    + """
import mlacheck
from tests.fixtures import synthetic_kernels as k
k.warmup(dtypes=("fp8",), causal=(True,))
mlacheck.serving_started()
k.dispatch(1, "fp8", True)  # all served as warmed: a PASS but for the image nothing observed
UNSEEN = "import time; time.sleep(0.3)  # stands for a serving-path compile nothing observes"
if {shell}:  # a shell runs it: the line names Python (no tree poll need see the brief child)
    first = subprocess.Popen(["sh", "-c", "python3 -S -c pass; true"])
else:  # an observed worker execs into it
    execs = "import os, sys; os.execv(sys.executable, [sys.executable, '-S', '-c', %r])" % UNSEEN
    first = subprocess.Popen([sys.executable, "-c", execs])
first.wait()
take_next(first.pid)
later = subprocess.Popen([sys.executable, "-c", "pass"])  # a later observed Python process in its pid
later.wait()
print("reused", later.pid == first.pid, flush=True)
"""
)


@pytest.mark.parametrize("shell", [False, True], ids=["exec", "sh -c"])
def test_an_unobserved_python_image_is_not_hidden_by_a_later_process_of_its_pid(tmp_path, shell):
    """Red-team 16 #4: a Python image nothing of mlacheck started in (`-S`: the exec of an observed worker, or a
    shell's command) is named though a later observed Python process takes its pid: a pid's traces, and the Python
    processes that stand for a command, are told apart by their start."""
    result = observe_in_namespace(tmp_path, HIDDEN_IMAGE.format(shell=shell))
    assert_not_pass(result, "incomplete")
    assert [line for line in result.report["incomplete"] if "ran unobserved" in line], result.report["incomplete"]


STOPPED_WORKER = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    worker = {served!r} + {end!r}
    ended = subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE)
    ended.stdout.readline()
    if {by_engine}:
        ended.terminate()  # the engine ends its worker: an observed SIGTERM that reached it
    print("ended by", ended.wait(), flush=True)
    """
)
FROM_OUTSIDE = 'import os, subprocess\nsubprocess.run(["sh", "-c", f"kill -TERM {os.getpid()}"])\nprint(flush=True)\n'
UNTIL_ENDED = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_DFL) if {dfl} else None\nprint(flush=True)\n"
)
UNTIL_ENDED += "time.sleep(60)\n"  # (until its engine ends it)


@pytest.mark.parametrize("dfl", [False, True], ids=["mlacheck's handler", "SIG_DFL"])
def test_a_worker_stopped_from_outside_while_the_program_goes_on_is_cut_short(tmp_path, dfl):
    """Red-team 16 #6: a worker ended by a SIGTERM that no observed process sent (earlyoom sends SIGTERM first) while
    the program goes on and exits 0: the stop cut its traffic short as a kill -9 does."""
    end = ("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_DFL)\n" if dfl else "") + FROM_OUTSIDE
    text = STOPPED_WORKER.format(served=SERVED, end=end, by_engine=False)
    assert_unverified(observe(tmp_path, sys.executable, program(tmp_path, text)), "was stopped by SIGTERM")


@pytest.mark.parametrize("dfl", [False, True], ids=["mlacheck's handler", "SIG_DFL"])
def test_a_worker_its_engine_stops_keeps_its_dead_warmup(tmp_path, dfl):
    """Popen.terminate() from an observed process reached the worker (its pid and start): an end its engine asked
    for, whether the worker's SIGTERM action was mlacheck's handler or the default put back (red-team 16, a false
    alarm: INCOMPLETE)."""
    text = STOPPED_WORKER.format(served=SERVED, end=UNTIL_ENDED.format(dfl=dfl), by_engine=True)
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert "ended by -15" in result.stdout, result.stdout
    assert result.report["verdict"] == "pass" and result.report["incomplete"] == [], result.report["incomplete"]
    statuses = {v["key"]["dtype"]: v["status"] for family in result.report["families"] for v in family["variants"]}
    assert statuses == {"fp8": "ok", "bf16": "dead warm-up"}, statuses
