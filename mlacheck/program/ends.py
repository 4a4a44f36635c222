"""How each process of a run ended, where its end cut its traffic short (`cut_short`): its program exited with a
status other than 0 or was killed by a signal that is no stop, or the process itself did (as the note beside its
trace says: `end_of`), or it was left running and ended by mlacheck. The analysis leaves what such a process never
dispatched unverified."""

from __future__ import annotations

import re
import signal
from collections.abc import Collection
from pathlib import Path

STOPS = ("SIGTERM", "SIGINT", "SIGHUP")  # how a program is asked to stop (a server is ended so), not how it crashes
STOPPED = {128 + getattr(signal, name) for name in STOPS}  # the status of a process that ends itself on a stop
MILLISECOND = 0.001  # an event's `t` is rounded to it (events.run_clock)
TEARDOWN = 120  # Python's status where its teardown failed (a flush to a closed pipe), its traffic over


def cut_short(
    paths: list[Path], programs: list[dict], processes: list[dict], served: Collection[int] = ()
) -> dict[int, str]:
    """The processes that ended before their traffic may have, each with how: every process of a run whose program
    exited with a status other than 0, or that a signal killed which is no stop (SIGKILL, SIGSEGV, SIGABRT, ...); else
    a process that ended so itself (`_own_end`), and where that process loaded a watched family (`served`: their
    indexes), every other process of its run: the traffic lost with it may have been theirs next (torchrun stops a
    crashed worker's peers and starts new ones, a pool replaces a killed worker, a broken pool ends the others).
    A stop someone asked for (one of STOPS, or any signal mlacheck forwarded: Ctrl-C, a CI job's SIGTERM) ends the
    traffic they let run, as a server is ended, whatever its processes do on their way out, but not an end that came
    before it (`_after`); so does a SIGKILL or a stop of a worker that an observed process sent (engines end their
    workers so), and no other stop. A run that never finished says so already."""
    ended, left, stops = _programs_ends(paths, programs)
    signals = _Signals(processes)
    own = {}  # proc -> how its own end cut its traffic short (None: it did not, or only at or after a stop)
    for proc, process in enumerate(processes):
        if process["run"] not in ended and not signals.exec_child(proc):
            reaped, sent = signals.reaped(proc), signals.sent(proc) | _left_stop(process, left)
            how = _own_end(process, reaped, sent)
            if reaped and not signals.reap_named(proc):  # (a reap that may be of a later child of its pid)
                how = how or _own_end(process, None, sent)
            stop = stops.get(process["run"])
            own[proc] = None if stop is not None and _after(process, signals.end_time(proc), stop, left) else how
    crashed = {}  # run -> the pid of its first process whose own end cut its traffic short
    for proc, how in own.items():
        if how and proc in served:
            crashed.setdefault(processes[proc]["run"], processes[proc]["pid"])
    cut = {proc: ended[process["run"]] for proc, process in enumerate(processes) if process["run"] in ended}
    for proc, how in own.items():
        process = processes[proc]
        after_end = None if process["run"] in stops else _left(process, left)  # (its end is mlacheck's, not its own)
        cut[proc] = after_end or how or _beside(process, crashed.get(process["run"]))
    return {proc: how for proc, how in cut.items() if how}


def _programs_ends(
    paths: list[Path], programs: list[dict]
) -> tuple[dict[str, str], dict[tuple, str], dict[str, tuple[float, int | None]]]:
    """How each run's program ended its traffic (run -> how; a run whose program exited 0, or was stopped, is not in
    it), how mlacheck ended each process a program left running ((run, pid, start) -> how), and each stopped run's
    stop (run -> (its time, the program's pid): when mlacheck forwarded it, else the program's end; +inf where neither
    is told: no end is then known to come after it)."""
    ended: dict[str, str] = {}
    left: dict[tuple, str] = {}
    stops: dict[str, tuple[float, int | None]] = {}
    for path, program in zip(paths, programs):
        for p in program.get("left_behind") or []:
            left[(str(path), p["pid"], _integer(p.get("start")))] = str(p.get("ended_by"))
        if _session(program).get("stopped"):  # a pytest session whose later tests never ran: no stop of its traffic
            ended[str(path)] = f"the session stopped early, {_session(program)['stopped']},"
            continue
        if program.get("forwarded") or program.get("signal") in STOPS:
            when = next((t for t in (program.get("stopped_at"), program.get("ended")) if _number(t)), float("inf"))
            stops[str(path)] = (when, _integer(program.get("pid")))
            continue
        if program.get("signal"):
            how = f"was killed by {program['signal']}"
        elif program.get("exit_code"):
            how = f"exited {program['exit_code']}"
        else:
            continue
        if program.get("compile_policy") == "skip" and not program.get("dry"):
            how += " (under --compile skip without --dry, a dispatch that launches a variant not compiled raises)"
        ended[str(path)] = f"the program {how}" + (f" (run {path})" if len(paths) > 1 else "")
    return ended, left, stops


def _after(process: dict, ended_at: float | None, stop: tuple[float, int | None], left: dict[tuple, str]) -> bool:
    """Whether a process of a stopped program ended at or after the stop (`stop`: its time, the program's pid): its
    end was then (`ended_at`: its parent's reap, else its exit event), or it is the program's own process, or mlacheck
    ended it, left running after the program's end. An end of no known time may have come before the stop (an OOM
    kill): it is not after it; nor one within the millisecond to which an event's `t` is rounded."""
    when, main = stop
    return (
        (ended_at is not None and ended_at >= when + MILLISECOND)
        or (main is not None and process["pid"] == main)
        or _left_end(process, left) is not None
    )


def _own_end(process: dict, reaped: tuple[str, int] | None, sent: Collection[int]) -> str | None:
    """How a process ended before its traffic may have where its program did not, as its note says, else as its parent
    reaped it (`reaped`): a status other than 0 (but one that says a stop: 143, 130, 129; or 120 after its exit event),
    a signal that is no stop before its exit event (after it, in the interpreter's teardown, its traffic had ended),
    except a SIGKILL that an observed process sent it (`sent`: the signals observed processes sent that reached it); a
    stop (its exit event's, or the signal that ended it) that no observed process sent it; or with no record of its end
    at all (no exit event, none in its note, no parent's reap) where no observed process ended it: killed from outside
    (the OOM killer, a kill -9). An image replaced by an exec ended no traffic; a trace written before kills were (no
    pgid) says nothing."""
    if process.get("exec") or process.get("truncated"):
        return None
    pid, (kind, number) = process["pid"], process.get("ended") or reaped or (None, 0)
    stop = _stop(process, kind, number)
    if stop is not None:
        return None if getattr(signal, stop) in sent else f"pid {pid} was stopped by {stop}{STOPPED_OUTSIDE}"
    if kind == "exit" and _bad_status(process, number):
        return f"pid {pid} exited {number}"
    if kind == "signal" and not process["exited"] and not (number == signal.SIGKILL and number in sent):
        return f"pid {pid} was killed by {_name(number)}" + (OUTSIDE if number == signal.SIGKILL else "")
    if kind is None and not process["exited"] and signal.SIGKILL not in sent and process.get("pgid") is not None:
        return f"pid {pid} ended with no record of how{OUTSIDE}"
    return None


def _bad_status(process: dict, number: int) -> bool:
    """Whether an exit status cut traffic short: not 0, nor one that says a stop (143, 130, 129), nor 120 after the
    exit event (Python's teardown could not flush)."""
    return bool(number) and number not in STOPPED and not (number == TEARDOWN and process["exited"])


def _stop(process: dict, kind: str | None, number: int) -> str | None:
    """The stop that ended a process (one of STOPS): its exit event's (mlacheck's handler), else the signal that
    killed it; None where none did."""
    stop = process.get("how") if process.get("how") in STOPS else _name(number) if kind == "signal" else None
    return stop if stop in STOPS else None


OUTSIDE = " (no other observed process sent it: the OOM killer, a kill -9 from outside, its own)"
STOPPED_OUTSIDE = " (no other observed process sent it: earlyoom, a kill from outside, its own)"


def _left(process: dict, left: dict[tuple, str]) -> str | None:
    """How mlacheck ended a process the program left running when it exited."""
    how, pid = _left_end(process, left), process["pid"]
    return f"pid {pid}, left running when the program exited, was ended by mlacheck ({how})" if how else None


def _left_end(process: dict, left: dict[tuple, str]) -> str | None:
    """The signal mlacheck ended the process with, left running when its program exited ((run, pid, start) -> its
    name): by its pid and start, where both are known (else by its pid: a meta.json of mlacheck 0.9.0)."""
    run, pid, ticks = process["run"], process["pid"], process.get("start_ticks")
    for (of, left_pid, start), how in left.items():
        if (of, left_pid) == (run, pid) and (start == ticks or None in (start, ticks)):
            return how
    return None


def _left_stop(process: dict, left: dict[tuple, str]) -> set[int]:
    """The stop mlacheck sent the process, left running when its program exited (as an observed process's: no end of
    its own)."""
    how = _left_end(process, left)
    return {getattr(signal, how)} if how in STOPS else set()


def _beside(process: dict, crashed: int | None) -> str | None:
    """A process of a run in which another process that served a watched family was cut short (`crashed`: its pid)."""
    if crashed is None or process["pid"] == crashed:
        return None
    return f"pid {process['pid']} shared its run with pid {crashed}, which was cut short,"


class _Signals:
    """The kills observed processes sent and the children they reaped (`kill`, `reaped` events), and the children
    they started by a fork and exec (`spawn` events), each told to the process it was about: the same run and host,
    and the same process, not only the same pid (a pid is reused)."""

    def __init__(self, processes: list[dict]) -> None:
        self.processes = processes
        self.reaps: dict[tuple, list[tuple]] = {}  # (run, host, pid) -> (when, how, number, by, the child's start)
        self.kills: dict[tuple, list[tuple]] = {}  # (run, host) -> (sender pid, signal, (pid, start) reached, when)
        self.spawns = {  # (run, host, child pid, child start, spawner pid) of each child started by a fork and exec
            (p["run"], p.get("host"), child, start, p["pid"])
            for p in processes
            for child, start in p.get("child_starts") or ()
        }
        self.born = _born(processes)
        for proc, process in enumerate(processes):
            where = (process["run"], process.get("host"))
            for event in process.get("signalled") or ():
                if event["type"] == "reaped":
                    reap = (_when(process, event), event["how"], event["number"], proc, _ticks(event))
                    self.reaps.setdefault((*where, event["pid"]), []).append(reap)
                else:
                    kill = (process["pid"], event["signal"], _reached(event.get("reached")), _when(process, event))
                    self.kills.setdefault(where, []).append(kill)

    def exec_child(self, proc: int) -> bool:
        """Whether the process is the Python image of a child forked and exec'd below Python (subprocess with a
        preexec_fn runs Python's fork hooks, not its exec hooks): the exec ended it, no traffic of its own. Only that
        child of the process it was forked from (its pid and start, as the spawn wrote them), and one that compiled
        or dispatched nothing."""
        process = self.processes[proc]
        child = (process["run"], process.get("host"), process["pid"], process.get("start_ticks"))
        return (
            child[3] is not None
            and process.get("forked_from") is not None
            and not process.get("worked")
            and (*child, process["forked_from"]) in self.spawns
        )

    def reaped(self, proc: int) -> tuple[str, int] | None:
        """How the process's parent reaped it: the first reap of its pid after its start by the process of its ppid
        (one that started no later than it: no later holder of that pid), of a child of its start (`reap_named`), or
        of a child of no start told (a reap of mlacheck 0.9.0 and before). While its zombie waits for that parent, no
        other process takes its pid."""
        reap = self._reap(proc)
        return reap[1:3] if reap else None

    def reap_named(self, proc: int) -> bool:
        """Whether the process's reap (`reaped`) names its start: it is this process's end, not a later child's of its
        pid (reaped after this one was reaped unseen: below Python, or by the kernel, SIGCHLD ignored)."""
        reap, ticks = self._reap(proc), self.processes[proc].get("start_ticks")
        return reap is not None and reap[4] is not None and reap[4] == ticks

    def reap_time(self, proc: int) -> float | None:
        """When the process's parent reaped it, on the wall clock, by a reap that names its start; else None."""
        reap = self._reap(proc)
        return reap[0] if reap and self.reap_named(proc) and reap[0] != float("inf") else None

    def _reap(self, proc: int) -> tuple | None:
        process = self.processes[proc]
        reaps = self.reaps.get((process["run"], process.get("host"), process["pid"]), [])
        ticks = process.get("start_ticks")
        after = [
            reap
            for reap in reaps
            if reap[0] >= _start(process) and self._parent(reap[3], proc) and reap[4] in (None, ticks)
        ]
        return min(after, key=lambda reap: reap[0]) if after else None

    def _parent(self, reaper: int, proc: int) -> bool:
        """Whether the reaper may be the process's parent: of its ppid, started no later than it (by their starts
        after boot, which an exec keeps; else by the wall clock, from the first image of the reaper's exec's)."""
        process, parent = self.processes[proc], self.processes[reaper]
        if process.get("ppid") is None or parent["pid"] != process["ppid"]:
            return False
        ticks, parent_ticks = process.get("start_ticks"), parent.get("start_ticks")
        if isinstance(ticks, int) and isinstance(parent_ticks, int):
            return parent_ticks <= ticks
        return self.born[reaper] <= _start(process)

    def sent(self, proc: int) -> set[int]:
        """The signals other observed processes sent the process: each kill that reached it (its pid and start), to its
        pid, or its group while it was in it. A kill that names no process it reached (of mlacheck 0.8.0 and before,
        to every process, or a signal other than SIGKILL of 0.9.0) is credited to none, nor is one sent after its
        parent reaped it (a later process of its pid that started in the same clock tick: the pair is no identity)."""
        process = self.processes[proc]
        pid, ticks, reaped_at = process["pid"], process.get("start_ticks"), self.reap_time(proc)
        kills = self.kills.get((process["run"], process.get("host")), ())
        return {
            signum
            for sender, signum, reached, when in kills
            if sender != pid and (pid, ticks) in reached and (reaped_at is None or when <= reaped_at + MILLISECOND)
        }

    def end_time(self, proc: int) -> float | None:
        """When the process ended, on the wall clock: its parent's reap of it (`reap_time`), else its exit event; None
        where neither is known."""
        reaped_at, process = self.reap_time(proc), self.processes[proc]
        exited_at = _when(process, {"t": process.get("exit_t")})
        return reaped_at if reaped_at is not None else exited_at if exited_at != float("inf") else None


def _reached(listed: object) -> set[tuple[int, int]]:
    """A kill event's `reached` as (pid, start) pairs (none where it names none)."""
    if not isinstance(listed, list):
        return set()
    return {(p[0], p[1]) for p in listed if isinstance(p, list) and len(p) == 2 and all(type(n) is int for n in p)}


def _ticks(event: dict) -> int | None:
    """An event's `start_ticks` (None where it names none, or not as a number of ticks)."""
    ticks = event.get("start_ticks")
    return ticks if type(ticks) is int else None


def _born(processes: list[dict]) -> list[float]:
    """When each process's first traced image started: an image that an exec began shares its process's start."""
    born: list[float] = []
    for proc, process in enumerate(processes):
        before = processes[proc - 1] if proc else None
        execd = before is not None and before.get("trace") == process.get("trace") and before.get("exec")
        born.append(born[-1] if execd else _start(process))
    return born


def _start(process: dict) -> float:
    started = process.get("started")
    return started if _number(started) else float("-inf")


def _integer(value: object) -> int | None:
    return value if type(value) is int else None


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _when(process: dict, event: dict) -> float:
    """When an event was, on the wall clock (its process's start and its `t`); where either is unknown, at the end."""
    t = event.get("t")
    if not _number(t) or _start(process) == float("-inf"):
        return float("inf")
    return _start(process) + t


def end_of(note: str | None) -> tuple[str, int, str] | None:
    """How a process ended, as the note beside its trace says in its last line (`program/_ending.c`): ("exit",
    status, its image's start) or ("signal", number, its image's start); None where it says nothing."""
    said = (note or "").split("\n")[1:2]
    words = said[0].split() if said else []
    if len(words) == 3 and words[0] in ("exit", "signal") and re.fullmatch("[0-9]{1,3}", words[1]):
        return words[0], int(words[1]), words[2]
    return None


def _name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def session_reasons(paths: list[Path], programs: list[dict]) -> list[str]:
    """Why a `pytest --mlacheck` session cannot pass, as its meta.json's `session` says: it stopped before its tests
    had all run (Ctrl-C; -x or --maxfail after a failure: `stopped`, with `ran` of `tests`), or its process tree was not
    recorded (`tree`: why)."""
    lines = []
    for path, program in zip(paths, programs):
        session, where = _session(program), f" (run {path})" if len(paths) > 1 else ""
        if session.get("stopped"):
            of = f" of {session['tests']}" if session.get("tests") else ""
            lines.append(
                f"the session stopped early, {session['stopped']}, after {session.get('ran', 0)}{of} test(s){where}: the "
                "tests after it never ran, so the traffic they would have sent was not observed"
            )
        if session.get("tree"):
            lines.append(
                f"the process tree was not recorded ({session['tree']}){where}: a Python process that nothing of "
                "mlacheck observed would not be named"
            )
    return lines


def left_serving(paths: list[Path], programs: list[dict], processes: list[dict], lookups: dict) -> list[str]:
    """A line for each process a pytest session left running, and mlacheck ended, that had served watched kernels
    (`lookups`: per process, the dispatches that reached a lookup): the session's end is no end of its traffic (what it
    had under way, or would have served next, was not observed), unlike a program's own end under `mlacheck run`."""
    left = {
        (str(path), p["pid"]): p
        for path, program in zip(paths, programs)
        if _session(program)
        for p in program.get("left_behind") or []
    }
    lines = []
    for proc, process in enumerate(processes):
        ended = left.get((process["run"], process["pid"]))
        if ended is not None and lookups.get(proc):
            command = " ".join(ended.get("argv") or process.get("argv") or [])[:200]
            lines.append(
                f"pid {process['pid']} ({command}), left running when the session ended, was ended by mlacheck "
                f"({ended.get('ended_by')}) while it served watched kernels: what it had under way was not observed; "
                "stop it in the test or fixture that started it"
            )
    return lines


def _session(program: dict) -> dict:
    """What a pytest session's meta.json says of the session ({} for any other run)."""
    session = program.get("session")
    return session if isinstance(session, dict) else {}
