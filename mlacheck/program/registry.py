"""The run registry: how a process whose environment was cleared finds the run it belongs to.

A run registers its root process (the supervisor of `mlacheck run`, the pytest process of `pytest --mlacheck`)
as a file in a fixed folder, /tmp/mlacheck-<uid>/runs/<pid>-<start time>, holding the run folder's path. A process
of the run descends from that root (the supervisor is a child subreaper, so an orphan is reparented to it, not to
init): walking its ancestors through /proc finds the nearest registered one, whatever its environment says. The
start time (in clock ticks since boot) tells a live root from a later process that reuses its pid.

Imported at the start of every Python process of an interpreter where mlacheck's .pth is installed: it imports
nothing but `os`, and costs one stat where no run is registered.
"""

from __future__ import annotations

import os
import stat

ROOT = "/tmp"


def registry_dir() -> str:
    """The folder of this user's registered runs (a fixed place: a cleared environment keeps only the uid)."""
    return os.path.join(ROOT, f"mlacheck-{os.getuid()}", "runs")


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


def entry_name(pid: int) -> str | None:
    """The registry entry's name for live process `pid`: "<pid>-<start time>"."""
    found = process_stat(pid)
    return f"{pid}-{found[1]}" if found is not None else None


def _trusted(path: str) -> bool:
    """A folder of ours that no one else can write into (not a link someone else planted)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def register(pid: int, run_dir: str) -> str:
    """Register `pid` as the root of the run in `run_dir`; returns the entry's path. OSError where it cannot be."""
    folder = registry_dir()
    name = entry_name(pid)
    if name is None:
        raise OSError(f"process {pid} is not readable in /proc")
    for _ in range(3):  # another run may remove the empty folder between our mkdir and our write
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not _trusted(os.path.dirname(folder)) or not _trusted(folder):
            raise OSError(f"{folder} is not a private folder of this user")
        _remove_stale(folder)
        path = os.path.join(folder, name)
        try:
            with open(f"{path}.tmp", "w", encoding="utf-8") as entry:
                entry.write(run_dir)
            os.replace(f"{path}.tmp", path)
            return path
        except FileNotFoundError:
            continue
    raise OSError(f"{folder}: could not write the entry")


def unregister(path: str) -> None:
    """Remove the entry, and the folder where it was the last one."""
    try:
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass


def find_run(pid: int | None = None) -> str | None:
    """The run folder of the nearest registered ancestor of `pid` (default: this process), else None."""
    folder = registry_dir()
    try:
        names = set(os.listdir(folder))
    except OSError:
        return None
    if not names or not _trusted(folder):
        return None
    current = os.getppid() if pid is None else (process_stat(pid) or (0, 0))[0]
    while current > 1:
        found = process_stat(current)
        if found is None:
            return None
        if f"{current}-{found[1]}" in names:
            try:
                with open(os.path.join(folder, f"{current}-{found[1]}"), encoding="utf-8") as entry:
                    return entry.read()
            except OSError:
                return None
        current = found[0]
    return None


def _remove_stale(folder: str) -> None:
    """Entries (and half-written ones) of roots that ended without removing theirs: killed."""
    for name in os.listdir(folder):
        pid, _, start = name.partition(".")[0].partition("-")
        if pid.isdigit() and start.isdigit() and entry_name(int(pid)) != f"{pid}-{start}":
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
