"""Python started through a process that is not Python (`sh -c 'python -S ...'`, a Makefile's recipe): a process that
starts and ends between two polls of the process tree is not seen (tree.py), and a spawn event names only a Python
process's own children (spawns.py). What is seen is the command that started it: a non-Python process whose command
line names a Python interpreter (a spawn event's argv, or the tree's record of it). Where no Python process of it was
traced or seen, it may have run one that nothing observed: the run cannot pass.

A command names Python where a Python interpreter is in a command's place: the command itself, the command a wrapper
runs (env, timeout, taskset, sudo, xargs, ...: read by the table of each one's options, wrappers.py), each command of a
shell's command line (-c, a script file, eval, `$(...)`, past shell keywords: `if ...; then python`), or an argument of
a command not known to run nothing (`perf record python3`, `perl -e 'system("python3")'`: an interpreter's name as a
token of its text), or an alias's value. A shell's positional parameters ($0, "$@") are put in from its argv. It fails
closed where the command cannot be read: a shell reading its commands from stdin or from a file that cannot be read, a
wrapper option not in its table, a command that is an expansion (`$P -S`) in a command line that names Python
anywhere, or a command word made by the shell that may match an interpreter's name (a glob `pytho[n]3`, an expansion
joined with text `${p}on3`), is named. A command that names Python and
runs none (`apt-get install python3`) may be named too: the check cannot tell them apart. What names nothing: an
argument of a command known to run nothing (`which python`, `command -v python3`, `echo python3`), and a word that is
not an interpreter's (a compiler's include folder /usr/include/python3.11)."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import stat
from collections.abc import Iterator

from mlacheck.program.shell_syntax import past_prefix, simple_commands, substituted, substitutions
from mlacheck.program.spawns import python_named
from mlacheck.program.tree import python_images
from mlacheck.program.wrappers import WRAPPERS, unwrap

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh"})
INERT = frozenset(
    "echo printf which type hash whereis pgrep pkill killall pidof grep test [ ls readlink realpath file stat ln cp mv "
    "rm cat alias unset export declare local readonly".split()
)  # commands whose arguments are not run
SHELL_VALUED = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})  # a shell's options that take a value
SCRIPT_BYTES = 1 << 20  # of a shell's script file read
PYENV = frozenset(
    "commands completions global help hooks init latest local prefix rehash root sh-rehash sh-shell shims version "
    "version-file version-file-read version-file-write version-name version-origin versions whence which".split()
)
"""pyenv's own commands (`libexec/pyenv-NAME`, beside its `pyenv`) that run no Python: its `python` shim runs `pyenv
exec python`, which asks `pyenv-which` for the interpreter and execs it (the shim's own process becomes Python);
`pyenv-which` and the others source their hooks (`source "$script"`), which cannot be read, so without this list every
run through a pyenv shim whose poll saw one of them would be incomplete."""
EXPANSION = re.compile(r"\$(\{[^}]*\}|\([^)]*\)|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?!$-])|`[^`]*`")  # $P ${P} $(..) `..`
POSITIONAL = re.compile(r'"\$\{?([0-9@*])\}?"|\$\{?([0-9@*])\}?')  # a shell's positional parameter, quoted or not
INTERPRETERS = ("python", "python2", "python3", *(f"python3.{minor}" for minor in range(30)), "pypy", "pypy3")
PYTHON_TOKEN = re.compile(  # an interpreter's name as a token of a text: "python3 -S", system("/usr/bin/python3")
    r"(?:^|[\s'\"(;|&`])(?:(?:[^\s'\"();|&`]*/)?bin/|\./)?(?:python|pypy)[0-9.]*[a-z]?(?=$|[\s'\";|&)])"
)


def names_python(argv: list[str]) -> bool:
    """Whether a command (a process's argv) runs a Python interpreter by name, or cannot be read (the module's
    docstring): only what it runs counts, not its own name (a process is Python or not by what it runs, tree.py)."""
    return bool(argv) and _runs_python(argv[0], argv[1:], None)


def _command_names_python(words: list[str], text: str | None) -> bool:
    """Whether a simple command (its words, from its first) is a Python interpreter or runs one; `text` is the shell
    command line it is part of (None: an argv, run without a shell)."""
    words = past_prefix(words)
    return bool(words) and (python_named(words[0]) or _runs_python(words[0], words[1:], text))


def _runs_python(command: str, arguments: list[str], text: str | None) -> bool:
    """Whether `command`, run with `arguments`, runs a Python interpreter by name."""
    name = os.path.basename(command)
    if text is not None and ("$" in command or "`" in command or re.search(r"[*?[]", name)):
        if _made_names_python(command, text):
            return True  # else read by the name as written: `$CC a.c`, `$WRAP python3`
    if name in SHELLS:
        return _shell_names_python(arguments)
    if name in (".", "source") and text is not None:
        return bool(arguments) and _file_names_python(arguments[0])
    if name == "eval":
        return _script_names_python(" ".join(arguments), text)
    if name in WRAPPERS:
        run = unwrap(WRAPPERS[name], arguments)
        if any(_script_names_python(script) for script in run.scripts):
            return True
        if run.known:
            return _command_names_python(run.command, text)
        return any(_interpreter_word(word) for word in run.command)  # an option not in its table: fail closed
    return _arguments_name_python(name, arguments, text)


def _arguments_name_python(name: str, arguments: list[str], text: str | None) -> bool:
    """Whether a command in no table runs Python by its arguments: an alias's value (a command line), or an
    interpreter's name as a word or as a token of an argument's text (perl -e 'system("python3")')."""
    if name == "alias":
        return any(_script_names_python(word.partition("=")[2], text) for word in arguments if "=" in word)
    return name not in INERT and any(_interpreter_word(word) or PYTHON_TOKEN.search(word) for word in arguments)


def _made_names_python(command: str, text: str) -> bool:
    """Whether a command word that the shell makes runs Python, or may: an expansion alone ($P, `...`) where the
    command line names Python anywhere (a bare `$CC` names nothing); one joined with text (${p}on3, a$b) or a glob
    (pytho[n]3) where its pattern (each expansion any text) may match an interpreter's name."""
    if EXPANSION.fullmatch(command):
        return _text_names_python(text)
    pattern = EXPANSION.sub("*", command)
    if "$" in pattern or "`" in pattern:
        return True  # an expansion not read ($'\\x70ython3', collapsed by the lexer): any text
    name = os.path.basename(pattern)
    return any(fnmatch.fnmatchcase(interpreter, name) for interpreter in INTERPRETERS)


def _interpreter_word(word: str) -> bool:
    """Whether a word is a Python interpreter's name or path (python3, ./python, /opt/venv/bin/python3), not a folder
    named after one (a compiler's -isystem /usr/include/python3.11, ninja -C build/python3)."""
    return python_named(word) and os.path.basename(os.path.dirname(word)) in ("", ".", "bin")


def _text_names_python(text: str) -> bool:
    """Whether a command line names a Python interpreter in any word, an assignment's value included (P=python3)."""
    return any(_interpreter_word(word) for word in re.split(r"[\s`$()=;|&<>\"'{}]+", text))


def _shell_names_python(arguments: list[str]) -> bool:
    """Whether a shell run with `arguments` runs Python: its -c command line, else its script file; one that reads its
    commands from stdin, or from a file that cannot be read, is named (they cannot be read)."""
    read = _shell_arguments(arguments)
    if read is None:
        return False
    command_line, stdin, operands = read
    if command_line:
        return bool(operands) and _script_names_python(_with_parameters(operands[0], operands[1:]))
    return stdin or not operands or (not _pyenvs_own(operands[0]) and _file_names_python(operands[0]))


def shell_commands(argv: list[str]) -> list[list[str]] | None:
    """The simple commands (each one's words from the command it runs: past assignments, keywords and a wrapper whose
    options are in its table, `exec g++`) of a shell's -c command line (`argv`: the shell's command, `sh -c LINE`);
    None where it is no shell, has no -c line, or its line cannot be split."""
    if not argv or os.path.basename(argv[0]) not in SHELLS:
        return None
    read = _shell_arguments(argv[1:])
    if read is None or not read[0] or not read[2]:
        return None
    commands = simple_commands(_with_parameters(read[2][0], read[2][1:]))
    return None if commands is None else [words for words in map(_run_command, commands) if words]


def _run_command(words: list[str]) -> list[str]:
    """The words of the command a simple command runs: past its prefix, and past each wrapper read by its table."""
    words = past_prefix(words)
    while words and os.path.basename(words[0]) in WRAPPERS:
        run = unwrap(WRAPPERS[os.path.basename(words[0])], words[1:])
        if not run.known or run.command == words:
            break
        words = past_prefix(run.command)
    return words


def _shell_arguments(arguments: list[str]) -> tuple[bool, bool, list[str]] | None:
    """(whether it runs a -c command line, whether it reads stdin (-s), its operands) of a shell run with
    `arguments`; None where it only asks (--version, --help)."""
    command_line = stdin = False
    at = 0
    while at < len(arguments) and arguments[at].startswith(("-", "+")) and arguments[at] not in ("-", "--", "+"):
        option = arguments[at]
        if option in ("--version", "--help"):
            return None
        if option in SHELL_VALUED:
            at += 1
        elif option.startswith("-") and not option.startswith("--"):
            command_line, stdin = command_line or "c" in option, stdin or "s" in option
        at += 1
    operands = arguments[at + 1 :] if arguments[at : at + 1] in (["-"], ["--"]) else arguments[at:]
    return command_line, stdin, operands


def _with_parameters(script: str, parameters: list[str]) -> str:
    """A shell's -c command line with its positional parameters put in from the words after it ($0 the first); one
    not given is left as it is (an expansion)."""

    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name in "@*":
            values = parameters[1:]
        elif int(name) < len(parameters):
            values = [parameters[int(name)]]
        else:
            return match.group(0)
        return shlex.join(values) if match.group(1) else " ".join(values)

    return POSITIONAL.sub(value, script)


def _pyenvs_own(path: str) -> bool:
    """Whether a script file is one of pyenv's own commands that run no Python (`PYENV`)."""
    folder, name = os.path.split(path)
    return (
        name.startswith("pyenv-")
        and name.removeprefix("pyenv-") in PYENV
        and os.path.basename(folder) == "libexec"
        and os.path.isfile(os.path.join(folder, "pyenv"))
    )


def _file_names_python(path: str) -> bool:
    """Whether a shell's script file runs Python; one that cannot be read at report time (gone, a path relative to
    another folder, not a regular file: /dev/stdin, a pipe) is named."""
    try:
        if path.startswith(("/dev/", "/proc/")) or not stat.S_ISREG(os.stat(path).st_mode):
            return True
        with open(path, "rb") as script:
            text = script.read(SCRIPT_BYTES).decode(errors="replace")
    except (OSError, ValueError):
        return True
    return _script_names_python(text)


def _script_names_python(script: str, text: str | None = None) -> bool:
    """Whether a shell command line runs a Python interpreter by name in one of its commands, or in a command
    substitution ($(...), `...`) of a word; `text` is the whole command line it is part of (itself where None)."""
    text = script if text is None else text
    commands = simple_commands(script)
    if commands is None:  # an unbalanced quote (the shell refuses it too), or a here-document: by its words
        return _text_names_python(script)
    if any(_command_names_python(words, text) for words in commands):
        return True
    inner = [found for words in commands for found in substitutions(words)]
    return any(_script_names_python(substituted(found), text) for found in inner)


def unseen_pythons(observed: list[dict], records: list[dict], host: str | None) -> Iterator[tuple[int, str]]:
    """(pid, line) of each non-Python process of the run (a traced process's spawn, or a record of the process tree)
    whose command names a Python interpreter, of which no Python process (a child, or its own exec) was traced or
    seen on its host. Each is a process of a pid and a start (clock ticks after boot), where known: a later process
    of its pid, or a child of one, does not stand for it."""
    ran = [record for record in records if python_images(record)]  # (a fork's copy of its parent ran no command)
    pythons = [(p.get("host"), p["pid"], p.get("ppid"), p.get("start_ticks")) for p in observed]
    pythons += [(host, record["pid"], record.get("ppid"), record.get("start")) for record in ran]
    starts = _starts(observed, records, host)
    stood = {(where, pid, start) for where, pid, _, start in pythons}
    stood |= {(where, ppid, _holder(starts, where, ppid, start)) for where, _, ppid, start in pythons}
    commands: dict[tuple, tuple[list[str], str]] = {}
    for process in observed:
        for spawned in process.get("spawned") or []:
            if not spawned["python"]:
                where = f", started by pid {process['pid']} on {process.get('host')}"
                child = (process.get("host"), spawned["child"], spawned.get("start_ticks"))
                commands.setdefault(child, (spawned["argv"], where))
    for record in records:
        if not record.get("python") and names_python(record.get("argv") or []):
            seen = (host, record["pid"], record.get("start"))
            commands.setdefault(seen, (record["argv"], f", seen running by mlacheck on {host}"))
    for (where, pid, start), (argv, how) in commands.items():
        if known(stood, where, pid, start):
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


def known(processes: set[tuple], where: str | None, pid: int, start: int | None) -> bool:
    """Whether the process of `pid` and `start` on host `where` is one of `processes` ((host, pid, start) each): by
    its start where both are known, else by its pid (a trace, a spawn or a record that names none)."""
    if start is None:
        return any(process[:2] == (where, pid) for process in processes)
    return (where, pid, start) in processes or (where, pid, None) in processes


def _starts(observed: list[dict], records: list[dict], host: str | None) -> dict[tuple, list[int]]:
    """(host, pid) -> the starts of every process of that pid that the run knows of: traced, spawned, or recorded."""
    starts: dict[tuple, set[int]] = {}
    for process in observed:
        where = process.get("host")
        for pid, start in [(process["pid"], process.get("start_ticks")), *(process.get("child_starts") or [])]:
            starts.setdefault((where, pid), set()).add(start)
    for record in records:
        starts.setdefault((host, record["pid"]), set()).add(record.get("start"))
    return {key: sorted(start for start in known if type(start) is int) for key, known in starts.items()}


def _holder(starts: dict[tuple, list[int]], where: str | None, pid: int | None, when: int | None) -> int | None:
    """The start of the process that held `pid` at `when` (a child's start: its parent's, the latest start of the pid
    no later than it); None where it is not known."""
    if when is None:
        return None
    return next((start for start in reversed(starts.get((where, pid), [])) if start <= when), None)


def kept_spawn(event: dict) -> bool:
    """Whether a spawn event is kept for the report: a Python child, or a command that names one."""
    return bool(event["python"]) or names_python([os.fsdecode(event["path"]), *event["argv"][1:]])
