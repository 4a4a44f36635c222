"""The supervisor's waits between two polls of the process tree: never longer than the poll's interval, and over as
soon as a process it waits on ends, so that the run's end is seen as its last process ends, not up to a poll later
(issue 29: a spawn-context program's resource tracker, which ends just after the main process, cost every run a
whole interval)."""

import subprocess
import sys
import time

from mlacheck.program import supervisor

SCENARIO = """
import errno, os, sys, time
from mlacheck.program import tree
from mlacheck.program.supervisor import end_remnants
from mlacheck.program.tree import ProcessTree
tree.POLL_SECONDS = float(sys.argv[1])
if sys.argv[2:] == ["no pidfd"]:  # as where there is none (not Linux, an older kernel)
    def refused(pid):
        raise OSError(errno.ENOSYS, "pidfd_open")
    os.pidfd_open = refused
import subprocess
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
processes = ProcessTree()
started = time.monotonic()
steps = end_remnants(None, 10.0, processes, subreaper=True)
print(steps, time.monotonic() - started, [seen.alive for seen in processes.seen.values()])
"""


def ended(interval: float, *how: str) -> tuple[int, float, list[bool]]:
    """How end_remnants ended (its step), how long it took, and which processes the tree still saw alive, for a
    process left after the main one (a resource tracker) that ends by itself after 0.3 s, polled every `interval`."""
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(interval), *how], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    steps, seconds, alive = done.stdout.split(" ", 2)
    return int(steps), float(seconds), eval(alive)  # noqa: S307 - a list of booleans this test printed


def test_what_is_left_of_the_program_is_seen_gone_as_it_ends_not_an_interval_later():
    """Polled every 8 s, its end is seen as it comes (before: at the next poll, 8 s later)."""
    steps, seconds, alive = ended(8.0)
    assert steps == 0 and alive == [False]  # it ended by itself, and the tree saw it
    assert seconds < 4.0, seconds


def test_where_no_end_can_be_waited_on_the_wait_is_the_interval():
    """Without a pidfd the supervisor sleeps the interval between polls, as before: the end is seen at the first poll
    after it."""
    steps, seconds, alive = ended(0.5, "no pidfd")
    assert steps == 0 and alive == [False]
    assert seconds >= 0.5, seconds


def test_a_wait_on_a_process_that_ended_before_it_was_asked_about_ends_at_once():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    started = time.monotonic()
    assert supervisor._until_one_ends([child.pid], 5.0) is True
    assert time.monotonic() - started < 2.5
