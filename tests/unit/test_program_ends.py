"""A process's end is told by the events of its own process only (`ends._Signals`), not of another holder of its pid
(red-team 14): an exec child is the spawn's child by its pid and start, and did no work; a reap is its parent's; a
SIGKILL names the processes it reached (`reaps.reached`: pid and start, read before it is sent), and is written once
sent, not where it raised."""

import os
import signal
import subprocess
import sys
import time

import pytest
from jsonschema import Draft202012Validator

from mlacheck import events, schemas
from mlacheck.program import ends, reaps
from mlacheck.program.ends import _Signals, cut_short

RUN = "run"


def process(pid: int, ticks: int | None = 500, started: float = 100.0, **more) -> dict:
    """A process as saved.py reads it from a trace (started: its run event's wall clock; ticks: its start after boot)."""
    fields = {"pid": pid, "ppid": 1, "host": "h", "run": RUN, "started": started, "start_ticks": ticks}
    fields |= {"signalled": [], "children": [], "forked_from": None, "worked": False, "exec": None, "trace": f"t{pid}"}
    return fields | more


def spawned(child: int, ticks: int | None) -> dict:
    """The spawn of `child` as saved.py reads it (`ticks`: its start, None where the event names none: 0.8.0's)."""
    return {"children": [child], "child_starts": [[child, ticks]] if ticks is not None else []}


@pytest.mark.parametrize(
    "child, spawn, excused",
    [
        ({}, 500, True),  # the spawn's own child: its pid and start
        ({}, 400, False),  # another process of that pid (a worker forked after the command ended)
        ({}, None, False),  # a spawn of mlacheck 0.8.0: no start to tell them apart
        ({"worked": True}, 500, False),  # a process that compiled or dispatched is never excused
        ({"forked_from": 8}, 500, False),  # forked from another process than the spawner
    ],
    ids=["its spawn", "another start", "no start written", "it worked", "another parent"],
)
def test_an_exec_child_is_the_spawns_child_by_its_pid_and_start_and_did_no_work(child, spawn, excused):
    spawner = process(7, ticks=100, **spawned(20, spawn))
    image = process(20, ppid=7) | {"forked_from": 7} | child
    assert _Signals([spawner, image]).exec_child(1) is excused


def reaped(pid: int, t: float = 5.0) -> dict:
    return {"type": "reaped", "pid": pid, "how": "exit", "number": 0, "t": t}


@pytest.mark.parametrize(
    "reaper, t, credited",
    [
        (process(7, ticks=100, signalled=[reaped(20)]), 5.0, True),  # its parent
        (process(8, ticks=100, signalled=[reaped(20)]), 5.0, False),  # another process reaped a later holder
        (process(7, ticks=900, signalled=[reaped(20)]), 5.0, False),  # a later holder of the parent's pid
        (process(7, ticks=None, started=150.0, signalled=[reaped(20)]), 5.0, False),  # the same, by the wall clock
        (process(7, ticks=100, started=50.0, signalled=[reaped(20, t=1.0)]), 1.0, False),  # before it started
    ],
    ids=["its parent", "another process", "its parent's pid, later", "its parent's pid, later (no ticks)", "before"],
)
def test_a_reap_is_its_parents_after_it_started(reaper, t, credited):
    worker = process(20, ticks=500, ppid=7)
    assert _Signals([reaper, worker]).reaped(1) == (("exit", 0) if credited else None)


def killed_by(signum: int, t: float) -> dict:
    return reaped(20, t) | {"how": "signal", "number": signum, "start_ticks": 500}


@pytest.mark.parametrize(
    "meta, t, cut",
    [
        ({"forwarded": ["SIGTERM"], "stopped_at": 110.0}, 5.0, True),  # reaped at 105, before the stop
        ({"forwarded": ["SIGTERM"], "stopped_at": 110.0}, 15.0, False),  # after it: the stop ended it
        ({"signal": "SIGTERM", "ended": 110.0}, 15.0, False),  # the program's own stop: by its end at the latest
        ({"signal": "SIGTERM", "ended": 120.0}, 15.0, True),
        ({"forwarded": ["SIGTERM"]}, 15.0, True),  # a meta.json of 0.9.0 with no time: nothing is after the stop
    ],
    ids=["before a forwarded stop", "after it", "after the program's stop", "before its end", "no time"],
)
def test_a_stop_excuses_only_the_ends_at_or_after_it(meta, t, cut):
    """Red-team 16 #1: a stop ends the traffic it lets run; a worker's end before it (an OOM kill) is judged."""
    parent, worker = process(7, ticks=100, signalled=[killed_by(signal.SIGKILL, t)]), process(20, ppid=7)
    processes = [parent | {"exited": True}, worker | {"exited": False, "pgid": 20}]
    assert (1 in cut_short([RUN], [meta], processes)) is cut
    main = {"pid": 20} | meta  # the program's own process ended with the program, after its stop
    assert 1 not in cut_short([RUN], [main], processes)


@pytest.mark.parametrize(
    "start, credited, named",
    [(500, True, True), (600, False, False), (None, True, False)],
    ids=["its start", "a later child's of its pid", "no start written (0.9.0)"],
)
def test_a_reap_is_of_the_child_of_its_start(start, credited, named):
    """Red-team 16 #3: a reap names its child's start; one of another start is a later child's of the pid, and one
    that names none (0.9.0's) is told but excuses nothing (`reap_named`)."""
    event = reaped(20) | ({"start_ticks": start} if start is not None else {})
    signals = _Signals([process(7, ticks=100, signalled=[event]), process(20, ticks=500, ppid=7)])
    assert signals.reaped(1) == (("exit", 0) if credited else None)
    assert signals.reap_named(1) is named
    assert (signals.reap_time(1) is not None) is named


@pytest.mark.parametrize("number, cut", [(0, True), (1, True)], ids=["exit 0", "exit 1"])
def test_a_reap_that_names_no_start_accuses_but_never_excuses(number, cut):
    event = reaped(20) | {"number": number}
    processes = [process(7, ticks=100, signalled=[event], exited=True), process(20, ppid=7, exited=False, pgid=20)]
    how = cut_short([RUN], [{}], processes).get(1)
    assert how == (f"pid 20 exited {number}" if number else "pid 20 ended with no record of how" + ends.OUTSIDE)


def kill(target: int, reached: list | None) -> dict:
    return {"type": "kill", "target": target, "signal": 9, "t": 1.0} | (
        {"reached": reached} if reached is not None else {}
    )


@pytest.mark.parametrize(
    "sent, credited",
    [
        (kill(20, [[20, 500]]), True),  # it, by its pid
        (kill(-30, [[21, 600], [20, 500]]), True),  # its group, while it was in it
        (kill(20, [[20, 400]]), False),  # another process of its pid
        (kill(-30, [[21, 600]]), False),  # a group it was not in (it left it)
        (kill(20, []), False),  # a zombie already, or gone
        (kill(20, None), False),  # a kill of mlacheck 0.8.0: by the pid alone
        (kill(-1, None), False),  # every process: not listed
        (kill(20, [[20, "500"], [20]]), False),  # not pairs of numbers
    ],
    ids=["its pid", "its group", "another start", "a group it left", "none reached", "0.8.0", "-1", "garbled"],
)
def test_a_sigkill_ends_a_process_only_where_it_reached_it(sent, credited):
    worker = process(20, ticks=500, pgid=30)
    assert (signal.SIGKILL in _Signals([process(7, signalled=[sent]), worker]).sent(1)) is credited
    assert signal.SIGKILL not in _Signals([process(20, ticks=500, signalled=[sent])]).sent(
        0
    )  # (its own kill is no engine's)


def test_a_kill_is_written_once_sent_before_where_it_may_end_its_sender_and_not_where_it_raised():
    order = []

    def real(target, signum):
        order.append(("sent", target))
        if target == 999:
            raise ProcessLookupError(target)

    hooked = reaps._kill_hook("kill", real, lambda name, target, signum: (target, signum, None), order.append)
    hooked(20, 9)
    hooked(os.getpid(), 9)
    with pytest.raises(ProcessLookupError):
        hooked(999, 9)
    hooked(-os.getpgrp(), 9)
    assert order == [
        ("sent", 20),
        (20, 9, None),
        (os.getpid(), 9, None),
        ("sent", os.getpid()),
        ("sent", 999),
        (-os.getpgrp(), 9, None),
        ("sent", -os.getpgrp()),
    ]


def test_a_kill_reaches_the_live_members_of_its_target_with_their_starts():
    """Real processes: a child, a member of its group, and a zombie, which no kill reaches any more."""
    leader = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(30)"], preexec_fn=os.setpgrp)
    member = subprocess.Popen(["sleep", "30"], preexec_fn=lambda: os.setpgid(0, leader.pid))  # (3.10: no process_group)
    ended = subprocess.Popen(["true"])
    try:
        while reaps.process_stat(ended.pid)[0] != "Z":  # until it is a zombie (not reaped yet)
            time.sleep(0.01)
        ticks = {pid: reaps.start_ticks(pid) for pid in (leader.pid, member.pid)}
        assert None not in ticks.values()
        assert reaps.reached(leader.pid) == ((leader.pid, ticks[leader.pid]),)
        assert set(reaps.reached(-leader.pid)) == set(ticks.items())
        assert reaps.reached(ended.pid) == () and reaps.reached(-1) is None
        assert reaps.start_ticks() == reaps.start_ticks(os.getpid())
        assert reaps.start_ticks(ended.pid) is not None  # (a spawn's child that ended at once is still told)
    finally:
        for child in (leader, member, ended):
            child.kill()
            child.wait()


def _restored(monkeypatch) -> None:
    """os's and signal's kill and wait functions as they are now, back after the test (reaps.hook wraps them)."""
    for module, name in [*((os, name) for name in reaps.KILLS + reaps.WAITS), (signal, reaps.PIDFD)]:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, getattr(module, name))


def test_a_kill_of_a_threads_id_reaches_its_process():
    """kill() of a thread's id ends the whole process: the kill reaches the process, by its pid and start (a false
    INCOMPLETE before: the thread's id and start were recorded, red-team 16)."""
    program = "import threading, time, os\nt = threading.Thread(target=time.sleep, args=(30,)); t.start()\n"
    program += "print(t.native_id, flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-S", "-c", program], stdout=subprocess.PIPE, text=True)
    try:
        thread = int(child.stdout.readline())
        assert thread != child.pid
        assert reaps.reached(thread) == ((child.pid, reaps.start_ticks(child.pid)),)
    finally:
        child.kill()
        child.wait()


def test_a_kill_of_a_pid_given_as_an_index_is_written(monkeypatch):
    """os.kill takes any object with __index__ (a numpy integer): its kill is written as the pid's (it was left out, a
    false INCOMPLETE: red-team 16); one whose __index__ raises is left to the call, which raises."""

    class Pid:
        def __init__(self, value):
            self.value = value

        def __index__(self):
            if self.value is None:
                raise TypeError("no pid")
            return self.value

    _restored(monkeypatch)
    written = []
    reaps.hook(written.append, lambda: True)
    child = subprocess.Popen(["sleep", "30"])
    ticks = reaps.start_ticks(child.pid)
    try:
        os.kill(Pid(child.pid), Pid(int(signal.SIGKILL)))
        child.wait()
        with pytest.raises(TypeError):
            os.kill(Pid(None), signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    kills = [event for event in written if event["type"] == "kill"]
    assert [(event["target"], event["signal"]) for event in kills] == [(child.pid, signal.SIGKILL)], kills
    assert [tuple(process) for process in kills[0]["reached"]] == [(child.pid, ticks)], kills


@pytest.mark.skipif(not hasattr(signal, "pidfd_send_signal"), reason="no pidfds here")
def test_a_kill_through_a_pidfd_is_written_as_its_process(monkeypatch):
    """signal.pidfd_send_signal names its process by a pidfd: its kill is written as that process's (a false INCOMPLETE
    before: it was not wrapped, red-team 16); one through the pidfd of a process that ended reaches no one."""
    _restored(monkeypatch)
    written = []
    reaps.hook(written.append, lambda: True)
    child = subprocess.Popen(["sleep", "30"])
    ticks, pidfd = reaps.start_ticks(child.pid), os.pidfd_open(child.pid)
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        child.wait()
        with pytest.raises(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)
        child.kill()
        child.wait()
    kills = [event for event in written if event["type"] == "kill"]
    assert [(event["target"], event["signal"]) for event in kills] == [(child.pid, signal.SIGKILL)], kills
    assert [tuple(process) for process in kills[0]["reached"]] == [(child.pid, ticks)], kills
    assert signal.pidfd_send_signal.__module__ == "signal"


def test_the_new_fields_fit_the_schemas():
    for event in (
        events.kill_event(-30, signal.SIGKILL, ((20, 500), (21, 600))),
        events.kill_event(20, signal.SIGTERM),
        events.spawn_event(20, "/bin/sh", ["sh"], False, None, 500),
        events.run_event(20, 100.0, start_ticks=500),
        events.reaped_event(20, "signal", 9, 500),
    ):
        schema = Draft202012Validator(schemas.event_schema(event["type"]))
        assert not [error.message for error in schema.iter_errors(event)], event
    assert "reached" not in events.kill_event(20, signal.SIGTERM)
    assert "start_ticks" not in events.reaped_event(20, "exit", 0)


@pytest.mark.parametrize(
    "name, args",
    [
        ("waitpid", lambda pid: (pid, 0)),
        ("waitpid", lambda pid: (-1, 0)),
        ("waitpid", lambda pid: (0, 0)),
        ("wait", lambda pid: ()),
        ("wait3", lambda pid: (0,)),
        ("wait4", lambda pid: (-os.getpgrp(), 0)),
        ("waitid", lambda pid: (os.P_PID, pid, os.WEXITED)),
        ("waitid", lambda pid: (os.P_ALL, 0, os.WEXITED)),
    ],
    ids=[
        "waitpid(pid)",
        "waitpid(-1)",
        "waitpid(0)",
        "wait()",
        "wait3",
        "wait4(-pgid)",
        "waitid(P_PID)",
        "waitid(P_ALL)",
    ],
)
def test_a_reap_names_the_start_of_the_child_it_reaped(name, args):
    """Red-team 16 #3: real children: the start is read before the wait (of the pid it names, else of the child a
    waitid with WNOWAIT finds), so it is the reaped child's, not a later process's of its pid."""
    child = subprocess.Popen(["true"])
    while reaps.process_stat(child.pid)[0] != "Z":
        time.sleep(0.01)
    ticks, written = reaps.start_ticks(child.pid), []
    hooked = reaps._wait_hook(name, getattr(os, name), lambda *reaped: written.append(reaped))
    hooked(*args(child.pid))
    child.returncode = 0  # (reaped here)
    assert written == [(child.pid, "exit", 0, ticks)]


def test_a_wait_that_reaps_nothing_names_no_child():
    written = []
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        assert reaps._wait_hook("waitpid", os.waitpid, lambda *reaped: written.append(reaped))(-1, os.WNOHANG) == (0, 0)
        assert (
            reaps._wait_hook("waitid", os.waitid, lambda *r: written.append(r))(os.P_ALL, 0, os.WEXITED | os.WNOHANG)
            is None
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert [reaped[0] for reaped in written] == [0, 0] and [reaped[3] for reaped in written] == [None, None]


def stopped_worker(how: str | None, end: tuple | None, **more) -> dict:
    """A worker that served and ended: `how` its exit event's (None: none written), `end` as its note says it."""
    worker = process(20, ticks=500, pgid=30, exited=how is not None, how=how)
    return worker | ({"ended": end} if end else {}) | more


@pytest.mark.parametrize(
    "sent, cut",
    [
        (None, "was stopped by SIGTERM"),  # no observed process sent it: earlyoom, a kill from outside
        (kill(20, [[20, 500]]) | {"signal": 15}, None),  # its engine's terminate() reached it
        (kill(20, [[20, 400]]) | {"signal": 15}, "was stopped by SIGTERM"),  # another process of its pid
        (kill(20, None) | {"signal": 15}, "was stopped by SIGTERM"),  # a stop of mlacheck 0.9.0: no `reached`
        (kill(20, [[20, 500]]) | {"signal": 2}, "was stopped by SIGTERM"),  # another stop
    ],
    ids=["from outside", "its engine's", "another start", "0.9.0", "another signal"],
)
@pytest.mark.parametrize("worker", [("SIGTERM", ("signal", 15)), (None, ("signal", 15))], ids=["handler", "SIG_DFL"])
def test_a_stop_ends_a_worker_only_where_an_observed_process_sent_it(sent, cut, worker):
    """Red-team 16 #6: a worker stopped while its program goes on and exits 0 (its exit event says the stop, or the
    signal killed it) is cut short unless an observed process's kill of that signal reached it."""
    processes = [process(7, signalled=[sent] if sent else [], exited=True), stopped_worker(*worker)]
    how = cut_short([RUN], [{"exit_code": 0}], processes).get(1)
    assert how == (f"pid 20 {cut}{ends.STOPPED_OUTSIDE}" if cut else None)


@pytest.mark.parametrize("start, cut", [(500, False), (400, True), (None, False)], ids=["it", "another", "0.9.0"])
def test_what_mlacheck_ended_is_the_process_it_left_running_by_its_start(start, cut):
    """A stopped program: a process mlacheck ended, left running after the program's end, ended after the stop; an
    earlier process of its pid (killed from outside before the stop) did not."""
    meta = {"forwarded": ["SIGTERM"], "stopped_at": 110.0, "left_behind": [{"pid": 20, "start": start}]}
    processes = [process(7, exited=True), stopped_worker(None, ("signal", 9))]
    assert (1 in cut_short([RUN], [meta], processes)) is cut


@pytest.mark.parametrize(
    "t, credited", [(4.0, True), (5.0, True), (6.0, False)], ids=["before", "the same ms", "after"]
)
def test_a_kill_after_its_parent_reaped_a_process_is_not_its_end(t, credited):
    """Red-team 16 #2: a later process of the pid that started in the same clock tick has the same (pid, start); a
    SIGKILL of it, sent after the worker's parent reaped the worker (its start named), is not the worker's end."""
    reap = killed_by(signal.SIGKILL, 5.0)
    sent = kill(20, [[20, 500]]) | {"t": t}
    assert (
        signal.SIGKILL in _Signals([process(7, ticks=100, signalled=[sent, reap]), process(20, ppid=7)]).sent(1)
    ) is credited
