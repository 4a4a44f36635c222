"""The processes an observed process starts without a Python fork of its own: subprocess's and multiprocessing's
fork-and-exec (`_posixsubprocess.fork_exec`, a fork and an exec in C, which the agent's exec hook never sees) and
os.posix_spawn / os.posix_spawnp, and os.system's shell (C's system()). Each one a spawn function started writes a
`spawn` event in the parent's trace: the child's pid and start (read at once: the two tell it from a later process of
its pid), what it runs, whether that is Python, and the rank its environment gives it. A Python child that then writes
no trace is named by the report whether or not a poll of the process tree saw it run: one that starts and ends between
two polls is not lost."""

from __future__ import annotations

import functools
import os
import sys

from mlacheck.events import spawn_event
from mlacheck.program.reaps import start_ticks

PYTHON_NAME = r"^(python|pypy)[0-9.]*[a-z]?$"  # an interpreter's executable by its name
SPAWN_FUNCTIONS = (
    ("_posixsubprocess", "fork_exec"),
    ("subprocess", "_fork_exec"),
    ("os", "posix_spawn"),
    ("os", "posix_spawnp"),
)


def hook(write, active) -> None:
    """Wrap every spawn function loaded (subprocess takes its own name for fork_exec where it is imported: that too)
    so that a child started while `active()` is written: `write(make)`, where `make()` reads the call into its event
    (called by the writer, so that what fails there is the writer's to report); a function wrapped already is left."""
    for module_name, name in SPAWN_FUNCTIONS:
        module = sys.modules.get(module_name)
        if module_name == "_posixsubprocess" and module is None:
            try:
                import _posixsubprocess as module
            except ImportError:  # not POSIX
                continue
        real = getattr(module, name, None)
        if real is not None and not getattr(real, "_mlacheck_spawn", False):
            setattr(module, name, _spawn_hook(name, real, write, active))


def hook_system(started, active) -> None:
    """Wrap os.system (C's system() starts its shell where no spawn function sees it) so that a command line run
    while `active()` is given to `started(path, argv)` before its shell starts: its pid is never known, so it has no
    spawn event."""
    real = os.system
    if getattr(real, "_mlacheck_spawn", False):
        return

    @functools.wraps(real)
    def system_hooked(command):
        if active():
            try:
                line = os.fsdecode(command)
            except TypeError:  # (refused by os.system, as given)
                line = None
            if line is not None:
                started("/bin/sh", ["sh", "-c", line])
        return real(command)

    system_hooked.__module__, system_hooked._mlacheck_spawn = "os", True  # (pickle finds it as os.system)
    os.system = system_hooked


def _spawn_hook(name: str, real, write, active):
    @functools.wraps(real)
    def spawn_hooked(*args, **kwargs):
        child = real(*args, **kwargs)
        if active():
            write(lambda: spawn_event(child, *_what_runs(name, args, kwargs), start_ticks(child)))
        return child

    spawn_hooked._mlacheck_spawn = True
    return spawn_hooked


def _what_runs(name: str, args: tuple, kwargs: dict) -> tuple[str, list[str], bool, int | None]:
    """(path, argv, python, rank) of a child: fork_exec(args, executable_list, close_fds, pass_fds, cwd, env, ...) or
    posix_spawn[p](path, argv, env, ...)."""
    if name.endswith("fork_exec"):
        argv, paths, env = args[0], list(args[1]), args[5]
    else:
        argv, paths, env = args[1], [args[0]], args[2] if len(args) > 2 else kwargs.get("env")
    path = os.fsdecode(paths[0]) if paths else "?"
    return path, as_text(argv), runs_python(path), environment_rank(env)


def as_text(argv) -> list[str]:
    """A command line given to an exec or a spawn (text, bytes or path-like parts), as text: its first 256 parts."""
    return [os.fsdecode(part) if isinstance(part, (str, bytes)) else str(part) for part in list(argv)[:256]]


def runs_python(path: str) -> bool:
    """Whether `path` runs a Python interpreter: named python* or pypy*, or this process's own interpreter (the same
    file, through any link)."""
    if python_named(path):
        return True
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return False
    return (info.st_dev, info.st_ino) == _interpreter()


@functools.cache
def _interpreter() -> tuple[int, int] | None:
    """This process's interpreter's file, as (device, inode), once."""
    try:
        info = os.stat(sys.executable)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def python_named(path: str) -> bool:
    import re  # here: the agent's start imports this module, and a process that starts nothing needs no re

    return re.match(PYTHON_NAME, os.path.basename(path)) is not None


def environment_rank(env=None) -> int | None:
    """RANK, else LOCAL_RANK, of an environment (a mapping, or NAME=VALUE items as text or bytes), or of this
    process's."""
    if env is None:
        variables = os.environ
    elif isinstance(env, dict):
        variables = {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}
    else:
        variables = dict(os.fsdecode(item).partition("=")[::2] for item in env)
    for variable in ("RANK", "LOCAL_RANK"):
        if variables.get(variable, "").isdecimal():
            return int(variables[variable])
    return None


def process_rank() -> int | None:
    """This process's rank: torch.distributed's where it was initialized, else its environment's."""
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_initialized():
            return distributed.get_rank()
    except Exception:  # noqa: BLE001
        pass
    return environment_rank()
