"""A pid reused by the run: the process tree reads again only every few polls the stat of a process it saw not to be
the run's, so a process of the run that took such a pid, ran no agent and ended before the next full poll went
unnamed (a PASS). Each test runs in a pid namespace of its own (`unshare -pf --mount-proc`), where writing
/proc/sys/kernel/ns_last_pid makes the next process take the pid that the test chooses: a real reuse, not a mock."""

import json
import shutil
import subprocess
import sys

import pytest

from tests.adversarial.conftest import ROOT, WARM, assert_not_pass, observe_wrapped, program

NAMESPACE = ("unshare", "--pid", "--fork", "--mount-proc")


def pid_namespace() -> None:
    """Skip unless this process may make a pid namespace with its own /proc (root, or user namespaces)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here: a pid cannot be reused on purpose")
    probe = subprocess.run([*NAMESPACE, "sh", "-c", "echo 1 > /proc/sys/kernel/ns_last_pid"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no pid namespace of its own here: {probe.stderr.decode().strip()}")


TREE = """
import json, os, subprocess, sys
from mlacheck.program.tree import ProcessTree

def take_next(pid):
    with open("/proc/sys/kernel/ns_last_pid", "w") as last:
        last.write(str(pid - 1))

# the run's main process: on a line from the test, a child of its own (one fork: the pid that the test freed)
root = subprocess.Popen(["sh", "-c", "read go; sleep 30 & echo $!; wait"], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True)
outsider = subprocess.Popen(["sleep", "30"])  # the test's own: not the run's
tree = ProcessTree(root=root.pid)
tree.poll()  # a full poll: the outsider is seen not to be the run's
before = sorted(tree._others)
outsider.kill()
outsider.wait()
take_next(outsider.pid)
root.stdin.write("go\\n")
root.stdin.flush()
child = int(root.stdout.readline())
tree.poll()  # not a full poll
print(json.dumps({"outsider": outsider.pid, "before": before, "child": child,
                  "live": [[seen.pid, seen.argv] for seen in tree.live()]}))
root.kill()
"""


def test_a_pid_seen_not_to_be_the_runs_and_reused_by_the_run_is_recorded_at_the_next_poll():
    """Driven poll by poll: the outsider's pid is among those the tree skips; after the outsider ends, a child of the
    run takes its pid, and the very next poll (not a full one) records it."""
    pid_namespace()
    done = subprocess.run(
        [*NAMESPACE, sys.executable, "-c", TREE], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["outsider"] in seen["before"], seen
    assert seen["child"] == seen["outsider"], f"the pid was not reused (the test's namespace forked): {seen}"
    assert [pid for pid, _ in seen["live"]] == [seen["child"]], seen  # the shell's fork, or the sleep it exec'd


REUSE = """
import os, signal, subprocess, sys, time
REUSE = {reuse}
outsider = int(os.environ["OUTSIDER"])
time.sleep(0.5)  # the supervisor has polled (a full poll first): the outsider is seen not to be the run's
os.kill(outsider, signal.SIGKILL)
while os.path.exists(f"/proc/{{outsider}}"):  # until the namespace's first process reaps it
    time.sleep(0.01)
# a child that runs Python without mlacheck (-S) for a moment, in the outsider's pid where REUSE; a child that did not
# get that pid (a process forked in between) runs no Python and is tried again
python = f"exec {{sys.executable}} -S -c 'import time; time.sleep(0.5)'"
script = f"[ $$ = {{outsider}} ] && {{python}}" if REUSE else python
for attempt in range(50):
    if REUSE:
        with open("/proc/sys/kernel/ns_last_pid", "w") as last:
            last.write(str(outsider - 1))
    child = subprocess.Popen(["sh", "-c", script])
    child.wait()
    if child.pid == outsider or not REUSE:
        break
with open(os.environ["CHILD"], "w") as told:
    told.write(f"{{child.pid}} {{outsider}}")
"""

FIRST = """
import os, subprocess, sys, threading
outsider = subprocess.Popen(["sleep", "60"])  # not the run's: mlacheck runs beside it
threading.Thread(target=outsider.wait, daemon=True).start()  # reaped as soon as the program ends it
os.environ["OUTSIDER"] = str(outsider.pid)
sys.exit(subprocess.run(sys.argv[1:]).returncode)
"""


@pytest.mark.parametrize("reuse", [True, False], ids=["pid reused", "a fresh pid"])
def test_a_child_that_ran_no_agent_in_a_pid_reused_from_outside_the_run_is_named(tmp_path, reuse):
    """The run's child ran Python without mlacheck (-S) for 0.5 s in a pid that a process outside the run had when
    the supervisor polled: it is named and the run is incomplete, as a child in a fresh pid is (every output says so).
    The supervisor's polls are its own: a full poll may fall in those 0.5 s, so the test above is the one that drives
    the reuse between two polls every time."""
    pid_namespace()
    child = tmp_path / "child.pid"
    wrapper = (*NAMESPACE, sys.executable, "-c", FIRST)
    command = [sys.executable, program(tmp_path, WARM + REUSE.format(reuse=reuse))]
    result = observe_wrapped(tmp_path, wrapper, command, tmp_path / "run", {"CHILD": str(child)})
    assert_not_pass(result, "incomplete")
    pid, outsider = map(int, child.read_text().split())
    assert (pid == outsider) == reuse, f"pid {pid}, the outsider's {outsider}"
    lines = [
        line for line in result.report["incomplete"] if line.startswith(f"a Python process ran unobserved: pid {pid} (")
    ]
    assert lines and "wrote no trace" in lines[0], result.report["incomplete"]


GROUP = """
import json, os, subprocess, sys, time
from mlacheck.program import supervisor
from mlacheck.program.tree import ProcessTree

# the run's main process, in a session (and process group) of its own, as the supervisor starts it; it ends and is
# reaped: its number, the group's, is free
program = subprocess.Popen(["true"], start_new_session=True)
tree = ProcessTree(root=program.pid)
tree.poll()
program.wait()
# a process of someone else's takes that number and leads a group of its own under it
with open("/proc/sys/kernel/ns_last_pid", "w") as last:
    last.write(str(program.pid - 1))
outsider = subprocess.Popen([sys.executable, "-S", "-c", "import os, time; os.setsid(); time.sleep(30)"])
deadline = time.monotonic() + 10
while os.getpgid(outsider.pid) != outsider.pid:
    assert time.monotonic() < deadline
    time.sleep(0.01)
started = time.monotonic()
steps = supervisor.end_remnants(program.pid, 0.5, tree, True)
print(json.dumps({"program": program.pid, "outsider": outsider.pid, "steps": steps,
                  "seconds": time.monotonic() - started, "outsider_alive": outsider.poll() is None}))
outsider.kill()
"""


def test_a_process_group_number_reused_after_the_program_ended_is_not_signalled():
    """After the main process ends, the rest of the program's group is given time, then SIGTERM and SIGKILL. Its
    number is the main process's pid: once that process is reaped and its group empty, the number may be another
    process's, leading a group of its own. That group is not the run's: it is neither waited on nor signalled (a real
    reuse in a pid namespace of the test's own)."""
    pid_namespace()
    done = subprocess.run(
        [*NAMESPACE, sys.executable, "-c", GROUP], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["outsider"] == seen["program"], f"the pid was not reused (the test's namespace forked): {seen}"
    assert seen["outsider_alive"] and seen["steps"] == 0 and seen["seconds"] < 1, seen
