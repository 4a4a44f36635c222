"""How each process of a run ended, where its end cut its traffic short (`cut_short`): its program exited with a
status other than 0 or was killed by a signal that is no stop, or the process itself did (as the note beside its
trace says: `end_of`), or it was left running and ended by mlacheck. The analysis leaves what such a process never
dispatched unverified."""

from __future__ import annotations

import re
import signal
from pathlib import Path

STOPS = ("SIGTERM", "SIGINT", "SIGHUP")  # how a program is asked to stop (a server is ended so), not how it crashes
STOPPED = {128 + getattr(signal, name) for name in STOPS}  # the status of a process that ends itself on a stop
TEARDOWN = 120  # Python's status where its teardown failed (a flush to a closed pipe), its traffic over


def cut_short(paths: list[Path], programs: list[dict], processes: list[dict]) -> dict[int, str]:
    """The processes that ended before their traffic may have, each with how: every process of a run whose program
    exited with a status other than 0, or that a signal killed which is no stop (SIGKILL, SIGSEGV, SIGABRT, ...); else
    a process that ended so itself (`_own_end`). A stop someone asked for (one of STOPS, or any signal mlacheck
    forwarded: Ctrl-C, a CI job's SIGTERM) ends the traffic they let run, as a server is ended, whatever its processes
    do on their way out; so does a SIGKILL of a worker alone (engines end their workers so). A run that never finished
    says so already."""
    ended: dict[str, str | None] = {}  # run -> how its program ended it (None: stopped, as asked)
    left: dict[tuple, str] = {}  # (run, pid) -> how mlacheck ended a process the program left running
    for path, program in zip(paths, programs):
        left.update({(str(path), p["pid"]): str(p.get("ended_by")) for p in program.get("left_behind") or []})
        if _session(program).get("stopped"):  # a pytest session whose later tests never ran: no stop of its traffic
            ended[str(path)] = f"the session stopped early, {_session(program)['stopped']},"
            continue
        if program.get("forwarded") or program.get("signal") in STOPS:
            ended[str(path)] = None  # (its workers' ends follow from it: a worker's KeyboardInterrupt exits 1)
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
    cut = {
        proc: ended[process["run"]] if process["run"] in ended else _own_end(process, left)
        for proc, process in enumerate(processes)
    }
    return {proc: how for proc, how in cut.items() if how}


def _own_end(process: dict, left: dict[tuple, str]) -> str | None:
    """How a process ended before its traffic may have where its program did not: a status other than 0 (but one that
    says a stop: 143, 130, 129; or 120 after its exit event), a signal that is no stop before its exit event (after it,
    in the interpreter's teardown, its traffic had ended), or mlacheck ended it, left running when the program
    exited."""
    pid, (kind, number) = process["pid"], process.get("ended") or (None, 0)
    if kind == "exit" and number not in STOPPED and not (number == TEARDOWN and process["exited"]):
        return f"pid {pid} exited {number}"
    if kind == "signal" and not process["exited"]:
        return f"pid {pid} was killed by {_name(number)}"
    if (process["run"], pid) in left:
        return f"pid {pid}, left running when the program exited, was ended by mlacheck ({left[(process['run'], pid)]})"
    return None


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
