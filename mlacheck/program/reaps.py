"""How an observed process ends others, and learns how its children ended: each os.kill / os.killpg /
signal.pidfd_send_signal it sends to another process or group (a `kill` event: the target, the signal; a signal 0,
which only asks whether a process lives, is none) and each child it reaps through os.wait* (a `reaped` event: the
child's pid and start, its exit status or the signal that killed it). The report tells by them a worker that its
engine ended (a SIGKILL or a stop from an observed process, as SGLang's kill_process_tree sends through psutil) from
one killed from outside (the OOM killer, a kill -9), and knows a child's end where the child could not write it
(os._exit, a fault under a handler installed before mlacheck's).

A kill event names the processes it reached (`reached`): each live process of its target (the pid, or every
member of the group) with its start, read from /proc just before it is sent, so that the report credits it to no
later holder of a pid nor to a process that had left the group. A kill is written once sent (one that raised reached
no one), but before where it may end its sender (its own pid or group). A reap names its child's start too, read
before the wait (`_to_reap`), so that the reap of a later child of a pid is not read as an earlier one's end."""

from __future__ import annotations

import functools
import operator
import os
import signal

KILLS = ("kill", "killpg")
WAITS = ("waitpid", "wait", "wait3", "wait4", "waitid")
PIDFD = "pidfd_send_signal"  # signal's: a kill of the process a pidfd refers to


def hook(write, active) -> None:
    """Wrap os's kill and wait functions so that, while `active()`, each kill sent and each child reaped is written:
    `write(event)`; a function wrapped already is left. Each wrapper calls the function as given and returns what it
    returns (its errors too); it answers to os's name, so that pickle finds it there."""
    from mlacheck.events import kill_event, reaped_event

    sent: set[tuple] = set()  # (target, signal, reached) written already: a loop of kills writes one

    def aimed(name: str, target: int, signum: int) -> tuple[int, int, tuple | None] | None:
        """The kill to write, as (target, signal, reached); None where there is none (a signal 0, a call refused)."""
        try:
            target, signum = operator.index(target), operator.index(signum)  # (as os.kill reads them: a numpy int)
        except Exception:  # noqa: BLE001 - a call the function refuses is refused by it, as given
            return None
        if signum == 0 or not active():
            return None
        if name == PIDFD:
            target = _pidfd_pid(target)
            if target <= 0:  # (its process ended: the call reaches no one)
                return None
        elif name == "killpg" or target <= 0:
            target = -os.getpgrp() if target == 0 else -abs(target)  # (a group, as kill's negative pid says it)
        return target, signum, reached(target)

    def killed(kill: tuple[int, int, tuple | None]) -> None:
        if kill not in sent:
            sent.add(kill)
            write(kill_event(*kill))

    def reaped(pid: int, how: str | None, number: int, start: int | None) -> None:
        if pid > 0 and how is not None and active():
            write(reaped_event(pid, how, number, start))

    for module, name in [*((os, name) for name in KILLS + WAITS), (signal, PIDFD)]:
        real = getattr(module, name, None)
        if real is not None and not getattr(real, "_mlacheck_end", False):
            wrapper = _wait_hook(name, real, reaped) if name in WAITS else _kill_hook(name, real, aimed, killed)
            wrapper.__module__, wrapper._mlacheck_end = module.__name__, True
            setattr(module, name, wrapper)


def _kill_hook(name: str, real, aimed, killed):
    @functools.wraps(real)
    def kill_hooked(target, signum, *rest, **options):
        kill = aimed(name, target, signum)
        if kill is not None and kill[0] in (os.getpid(), -os.getpgrp()):
            killed(kill)  # (before: a process that kills itself ends in the call)
            kill = None
        result = real(target, signum, *rest, **options)
        if kill is not None:
            killed(kill)
        return result

    return kill_hooked


def reached(target: int) -> tuple[tuple[int, int], ...] | None:
    """The live processes a kill of `target` reaches now, as (pid, start): the pid's process, or each member of the
    group (minus its pgid); None for every process (-1: not listed). A zombie is reached no more."""
    if target == -1:
        return None
    members = []
    for pid in [_process_of(target)] if target > 0 else _listed_pids():
        stat = process_stat(pid)
        if stat is not None and stat[0] not in ("Z", "X") and (target > 0 or stat[1] == -target):
            members.append((pid, stat[2]))
    return tuple(members)


def _process_of(pid: int) -> int:
    """The process a pid names: a thread's id names its thread group, which a kill of it ends (its `Tgid:`)."""
    return _number_in(f"/proc/{pid}/status", b"Tgid:", pid)


def _pidfd_pid(pidfd: int) -> int:
    """The pid of the process a pidfd of this process refers to (its fdinfo's `Pid:`; -1 once it ended, 0 where it
    cannot be read)."""
    return _number_in(f"/proc/self/fdinfo/{pidfd}", b"Pid:", 0)


def _number_in(path: str, label: bytes, otherwise: int) -> int:
    """The number on the line of a /proc file that starts with `label`; `otherwise` where there is none."""
    try:
        with open(path, "rb") as lines:
            for line in lines:
                if line.startswith(label):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return otherwise


def _listed_pids() -> list[int]:
    try:
        return sorted(int(entry) for entry in os.listdir("/proc") if entry.isdigit())
    except OSError:
        return []


def process_stat(pid: int | str) -> tuple[str, int, int] | None:
    """(state, process group, start in clock ticks after boot) of a process, from /proc/PID/stat (its fields 3, 5 and
    22; with its pid, the start tells it from a later process of that pid); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[2]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def start_ticks(pid: int | str = "self") -> int | None:
    """A process's start (clock ticks after boot; a zombie's too), this process's by default; None where it cannot be
    read."""
    stat = process_stat(pid)
    return stat[2] if stat is not None else None


def _wait_hook(name: str, real, reaped):
    @functools.wraps(real)
    def wait_hooked(*args, **kwargs):
        child = _to_reap(name, args)
        result = real(*args, **kwargs)
        pid, how, number = _waitid_end(result) if name == "waitid" else _status_end(result[0], result[1])
        reaped(pid, how, number, child[1] if child is not None and child[0] == pid else None)
        return result

    return wait_hooked


def _to_reap(name: str, args: tuple) -> tuple[int, int | None] | None:
    """The child a wait call is about to reap, as (pid, start), read before the call while the child still holds its
    pid (a zombie's stat is still there): the pid it names, else the child that a waitid with WNOWAIT finds (which it
    leaves to the call); None where none is known. What the waitid raises is left to the call itself."""
    waited = _waited(name, args)
    if waited is None:
        return None
    idtype, ident, options = waited
    if idtype == os.P_PID:
        return ident, start_ticks(ident)
    try:
        found = os.waitid(idtype, ident, options | os.WNOWAIT)
    except (OSError, ValueError, TypeError, OverflowError):
        return None
    return (found.si_pid, start_ticks(found.si_pid)) if found is not None else None


def _waited(name: str, args: tuple) -> tuple[int, int, int] | None:
    """A wait call's children as waitid's (idtype, id, options); None where its arguments are not understood."""
    if not hasattr(os, "waitid") or not all(type(arg) is int for arg in args):
        return None
    if name == "waitid" and len(args) == 3 and args[0] in (os.P_PID, os.P_PGID, os.P_ALL):
        return args
    if name == "wait" and not args:
        pid, options = -1, 0
    elif name == "wait3" and len(args) == 1:
        pid, options = -1, args[0]
    elif name in ("waitpid", "wait4") and len(args) == 2:
        pid, options = args
    else:
        return None
    options |= os.WEXITED  # (waitpid's WUNTRACED is waitid's WSTOPPED: the same bit)
    if pid > 0:
        return os.P_PID, pid, options
    return (os.P_ALL, 0, options) if pid == -1 else (os.P_PGID, -pid if pid else os.getpgrp(), options)


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
