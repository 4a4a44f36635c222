"""How an observed process ends others, and learns how its children ended: each os.kill / os.killpg it sends to
another process or group (a `kill` event: the target, the signal; a signal 0, which only asks whether a process lives,
is none) and each child it reaps through os.wait* (a `reaped` event: the child's pid, its exit status or the signal
that killed it). The report tells by them a worker that its engine ended (a SIGKILL from an observed process, as
SGLang's kill_process_tree sends through psutil) from one killed from outside (the OOM killer, a kill -9), and knows
a child's end where the child could not write it (os._exit, a fault under a handler installed before mlacheck's)."""

from __future__ import annotations

import functools
import os

KILLS = ("kill", "killpg")
WAITS = ("waitpid", "wait", "wait3", "wait4", "waitid")


def hook(write, active) -> None:
    """Wrap os's kill and wait functions so that, while `active()`, each kill sent and each child reaped is written:
    `write(event)`; a function wrapped already is left. Each wrapper calls the function as given and returns what it
    returns (its errors too); it answers to os's name, so that pickle finds it there."""
    from mlacheck.events import kill_event, reaped_event

    sent: set[tuple[int, int]] = set()  # (target, signal) written already: a loop of kills writes one

    def killed(name: str, target: int, signum: int) -> None:
        if not isinstance(target, int) or not isinstance(signum, int) or signum == 0 or not active():
            return  # (a call the function refuses is refused by it, as given)
        if name == "killpg" or target <= 0:
            target = -os.getpgrp() if target == 0 else -abs(target)  # (a group, as kill's negative pid says it)
        if (target, signum) not in sent:
            sent.add((target, signum))
            write(kill_event(target, signum))

    def reaped(pid: int, how: str | None, number: int) -> None:
        if pid > 0 and how is not None and active():
            write(reaped_event(pid, how, number))

    for name in KILLS + WAITS:
        real = getattr(os, name, None)
        if real is not None and not getattr(real, "_mlacheck_end", False):
            wrapper = _kill_hook(name, real, killed) if name in KILLS else _wait_hook(name, real, reaped)
            wrapper.__module__, wrapper._mlacheck_end = "os", True
            setattr(os, name, wrapper)


def _kill_hook(name: str, real, killed):
    @functools.wraps(real)
    def kill_hooked(target, signum):
        killed(name, target, signum)  # (before: a process that kills itself ends in the call)
        return real(target, signum)

    return kill_hooked


def _wait_hook(name: str, real, reaped):
    @functools.wraps(real)
    def wait_hooked(*args, **kwargs):
        result = real(*args, **kwargs)
        reaped(*(_waitid_end(result) if name == "waitid" else _status_end(result[0], result[1])))
        return result

    return wait_hooked


def _status_end(pid: int, status: int) -> tuple[int, str | None, int]:
    """A wait status as (pid, "exit", its status) or (pid, "signal", its number); how None for a child that was only
    stopped or continued."""
    if not (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
        return pid, None, 0
    code = os.waitstatus_to_exitcode(status)
    return (pid, "exit", code) if code >= 0 else (pid, "signal", -code)


def _waitid_end(result) -> tuple[int, str | None, int]:
    """A waitid result as `_status_end` says a wait status (None: no child had changed, under WNOHANG)."""
    if result is None:
        return 0, None, 0
    return result.si_pid, _WAITID_ENDS.get(result.si_code), result.si_status


_WAITID_ENDS = {  # a waitid result's si_code: how its child ended (si_status its status, or its signal)
    getattr(os, "CLD_EXITED", 1): "exit",
    getattr(os, "CLD_KILLED", 2): "signal",
    getattr(os, "CLD_DUMPED", 3): "signal",
}
