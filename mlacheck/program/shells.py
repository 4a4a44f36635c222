"""Python started through a process that is not Python (`sh -c 'python -S ...'`, a Makefile's recipe): a process that
starts and ends between two polls of the process tree is not seen (tree.py), and a spawn event names only a Python
process's own children (spawns.py). What is seen is the command that started it: a non-Python process whose command
line names a Python interpreter (a spawn event's argv, or the tree's record of it). Where no Python process of it was
traced or seen, it may have run one that nothing observed: the run cannot pass. (A command that names Python and runs
none, `which python`, is named too: the check cannot tell it apart.)"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator

from mlacheck.program.spawns import python_named


def names_python(argv: list[str]) -> bool:
    """Whether a command line names a Python interpreter among its words (a shell's -c command split into its own)."""
    for part in argv[1:]:
        try:
            words = shlex.split(part)
        except ValueError:
            words = part.split()
        if any(python_named(word.rstrip(";&|)")) for word in words):
            return True
    return False


def unseen_pythons(observed: list[dict], records: list[dict], host: str | None) -> Iterator[tuple[int, str]]:
    """(pid, line) of each non-Python process of the run (a traced process's spawn, or a record of the process tree)
    whose command names a Python interpreter, of which no Python process (a child, or its own exec) was traced or
    seen on its host."""
    pythons = {(process.get("host"), process["pid"]) for process in observed}
    pythons |= {(process.get("host"), process.get("ppid")) for process in observed}
    pythons |= {(host, record["pid"]) for record in records if record.get("python")}
    pythons |= {(host, record.get("ppid")) for record in records if record.get("python")}
    commands: dict[tuple, tuple[list[str], str]] = {}
    for process in observed:
        for spawned in process.get("spawned") or []:
            if not spawned["python"]:
                where = f", started by pid {process['pid']} on {process.get('host')}"
                commands.setdefault((process.get("host"), spawned["child"]), (spawned["argv"], where))
    for record in records:
        if not record.get("python") and names_python(record.get("argv") or []):
            commands.setdefault((host, record["pid"]), (record["argv"], f", seen running by mlacheck on {host}"))
    for (where, pid), (argv, how) in commands.items():
        if (where, pid) in pythons:
            continue
        line = f"pid {pid} ({' '.join(argv)[:200]}){how}, ran a command that names a Python interpreter, and no "
        yield (
            pid,
            line
            + (
                "Python process of it was traced or seen: one may have run too briefly for the process tree's polls, with "
                "nothing of mlacheck in it (-S, or a cleared environment)"
            ),
        )


def kept_spawn(event: dict) -> bool:
    """Whether a spawn event is kept for the report: a Python child, or a command that names one."""
    return bool(event["python"]) or names_python([os.fsdecode(event["path"]), *event["argv"]])
