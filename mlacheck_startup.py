"""mlacheck's start path: mlacheck-startup.pth calls `start()` at the start of a Python process where a run may be
active (MLACHECK_RUN_DIR is set, or the run registry's folder exists), and `start()` imports the mlacheck package only
where this process belongs to a run. A process of no run imports nothing of mlacheck (so pytest has nothing to warn
about: PYTEST_DONT_REWRITE) and pays a few system calls: nothing here lists a folder or reads a file another user
could have written.

The run registry is how a process whose environment was cleared finds the run it belongs to. A run registers its
root process (the supervisor of `mlacheck run`, the pytest process of `pytest --mlacheck`) as a file named
"<pid>-<start time>" holding the run folder's path, in a folder of this user's alone: /run/user/<uid>/mlacheck-runs
where /run/user/<uid> (the usual $XDG_RUNTIME_DIR) is a private folder of this user, else /tmp/mlacheck-<uid>/runs.
A process of the run descends from that root (the supervisor is a child subreaper, so an orphan is reparented to
it): walking its ancestors through /proc finds the nearest registered one, whatever its environment says; the start
time tells a live root from a later process that reuses its pid. A registry folder that is a link, or that anyone
else could write, is ignored before anything in it is looked at.

The bootstrap folder (mlacheck/program/bootstrap, on PYTHONPATH for a run's processes) is for an interpreter whose
`site` never calls `start()`; where it does, `start()` takes the folder off sys.path (`leave_bootstrap`).

Standard library only (os, stat and sys, all loaded by every interpreter already).
"""

from __future__ import annotations

import os
import stat
import sys

ROOT = "/tmp"  # the registry's place where /run/user/<uid> is not a private folder of the user
RUNTIME = "/run/user"
ENV_RUN_DIR = "MLACHECK_RUN_DIR"
MAX_ANCESTORS = 256
ENTRY_LIMIT = 4096  # an entry holds a path
BOOTSTRAP = os.path.join("mlacheck", "program", "bootstrap")  # under the folder this module is in


def uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else -1


def registry_dir() -> str:
    """The folder of this user's registered runs (a fixed place: a cleared environment keeps only the uid)."""
    runtime = os.path.join(RUNTIME, str(uid()))
    if refusal(runtime, private=True) is None:
        return os.path.join(runtime, "mlacheck-runs")
    return os.path.join(ROOT, f"mlacheck-{uid()}", "runs")


def refusal(path: str | os.PathLike, private: bool = False) -> str | None:
    """Why `path` is not a folder of this user's that no one else can write (`private`: nor read), else None.
    Never follows a link: a link where a folder should be is refused."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a folder"
    if info.st_uid != uid():
        return f"{path} belongs to uid {info.st_uid}, not to this user ({uid()})"
    if info.st_mode & (0o077 if private else 0o022):
        return f"{path} can be {'read' if private else 'written'} by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def process_stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live process, else None."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = data.rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def find_run(pid: int | None = None) -> str | None:
    """The run folder of the nearest registered ancestor of `pid` (default: this process), else None. Looks at the
    registry only where it is this user's alone, and then opens one entry per ancestor by name (no listing)."""
    folder = registry_dir()
    if refusal(os.path.dirname(folder)) is not None or refusal(folder) is not None:
        return None
    current = os.getppid() if pid is None else (process_stat(pid) or (0, 0))[0]
    for _ in range(MAX_ANCESTORS):
        found = process_stat(current) if current > 1 else None
        if found is None:
            return None
        entry = _read_entry(os.path.join(folder, f"{current}-{found[1]}"))
        if entry is not None:
            return entry
        current = found[0]
    return None


def _read_entry(path: str) -> str | None:
    """A registry entry's run folder, if `path` is a small regular file of this user's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != uid():
            return None
        return os.read(fd, ENTRY_LIMIT).decode(errors="replace") or None
    except OSError:
        return None
    finally:
        os.close(fd)


_tried = False


def start() -> None:
    """Start the capture agent if this process belongs to a run (its nearest registered ancestor's, else the one
    MLACHECK_RUN_DIR names), once (a venv's lib64 link to lib has `site` read the .pth twice); never raises into
    the interpreter's start."""
    global _tried
    if _tried:
        return
    _tried = True
    leave_bootstrap()
    run_dir, found_by = None, "registry"
    try:
        run_dir = find_run()
        if run_dir is None:
            run_dir, found_by = os.environ.get(ENV_RUN_DIR) or None, "environment"
    except Exception:  # noqa: BLE001 - a process of no run is left as it is
        return
    if run_dir is None:
        return
    try:
        from mlacheck.program.autostart import join
    except Exception as exc:  # noqa: BLE001 - a broken installation: the process runs on, and says so
        os.write(2, f"mlacheck: capture is off in process pid {os.getpid()}: {type(exc).__name__}: {exc}\n".encode())
        return
    join(run_dir, found_by)


def leave_bootstrap() -> None:
    """Take this mlacheck's bootstrap folder off sys.path: `start()` ran, so the folder's sitecustomize.py, which site
    imports next, would only run the sitecustomize it shadows, and site finds that one itself once the folder is gone
    (as the program's own interpreter would, by its own name). Every later import of a top-level module then skips a
    folder that the program's sys.path does not have without mlacheck; the environment keeps it, for the processes
    this one starts. Matched by identity (device and inode: the supervisor names the folder by its resolved path), a
    stat for each entry named like it; where none is, sys.path is left as it is; never raises."""
    try:
        suffix = os.sep + BOOTSTRAP
        named = [entry for entry in sys.path if isinstance(entry, str) and entry.rstrip(os.sep).endswith(suffix)]
        if not named:
            return
        own = os.stat(os.path.join(os.path.dirname(os.path.abspath(__file__)), BOOTSTRAP))
        for entry in named:
            info = os.stat(entry)
            if (info.st_dev, info.st_ino) == (own.st_dev, own.st_ino):
                sys.path[:] = [other for other in sys.path if other != entry]
                sys.path_importer_cache.pop(entry, None)
    except (OSError, ValueError):
        pass
