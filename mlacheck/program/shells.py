"""Python started through a process that is not Python (`sh -c 'python -S ...'`, a Makefile's recipe): a process that
starts and ends between two polls of the process tree is not seen (tree.py), and a spawn event names only a Python
process's own children (spawns.py). What is seen is the command that started it: a non-Python process whose command
line names a Python interpreter (a spawn event's argv, or the tree's record of it). Where no Python process of it was
traced or seen, it may have run one that nothing observed: the run cannot pass. (A command that names Python and runs
none, `which python`, is named too: the check cannot tell it apart; a word that is only an argument, such as a
compiler's include folder python3.11, names nothing.)"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator

from mlacheck.program.spawns import python_named

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
WRAPPERS = frozenset({"env", "exec", "nohup", "time", "command", "nice", "setsid", "stdbuf", "timeout", "taskset"})
SEPARATORS = frozenset({";", "&", "&&", "|", "||", "(", ")", "\n"})


def names_python(argv: list[str]) -> bool:
    """Whether a command runs a Python interpreter by name: a shell's -c command one of whose commands is one, or a
    wrapper (env, nohup, timeout, ...) that runs one. Only a command's own word counts: a path among its arguments
    (a compiler's include folder python3.11) runs nothing."""
    if not argv:
        return False
    if os.path.basename(argv[0]) in SHELLS:
        script = next((argv[at + 1] for at in range(1, len(argv) - 1) if _runs_command(argv[at])), None)
        return script is not None and _script_names_python(script)
    return os.path.basename(argv[0]) in WRAPPERS and python_named(_first_command(argv[1:], 0) or "")


def _runs_command(option: str) -> bool:
    """Whether a shell's option takes the command to run next (-c, or a cluster of short options with c: -lc)."""
    return option.startswith("-") and not option.startswith("--") and "c" in option


def _script_names_python(script: str) -> bool:
    """Whether a shell command line runs a Python interpreter by name as one of its commands."""
    lexer = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: the shell refuses it too
        return False
    starts = [0] + [at + 1 for at, word in enumerate(words) if word in SEPARATORS]
    return any(python_named(_first_command(words, start) or "") for start in starts)


def _first_command(words: list[str], start: int) -> str | None:
    """The word that runs at `start` of a command: past assignments (A=1), wrappers, their options and durations."""
    for word in words[start:]:
        if word in SEPARATORS:
            return None
        if ("=" in word and not word.startswith("-")) or os.path.basename(word) in WRAPPERS or word.startswith("-"):
            continue
        if word.replace(".", "").isdigit():  # a duration (timeout 5)
            continue
        return word
    return None


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
