"""The run registry (its lookup, which every Python process may do at start, is mlacheck_startup's): registering
a run's root process, and removing the entry at the end.

A registry folder is made without following links, mode 0700, and used only where lstat shows a folder of this
user's that no one else can write; an entry is created exclusively, never through a link.
"""

from __future__ import annotations

import os

from mlacheck_startup import find_run, process_stat, refusal, registry_dir

__all__ = ["entry_name", "find_run", "register", "registry_dir", "unregister"]
STALE_LIMIT = 10_000  # entries looked at for stale ones at one registration


def entry_name(pid: int) -> str | None:
    """The registry entry's name for live process `pid`: "<pid>-<start time>"."""
    found = process_stat(pid)
    return f"{pid}-{found[1]}" if found is not None else None


def register(pid: int, run_dir: str) -> str:
    """Register `pid` as the root of the run in `run_dir`; returns the entry's path. OSError where it cannot be."""
    folder = registry_dir()
    name = entry_name(pid)
    if name is None:
        raise OSError(f"process {pid} is not readable in /proc")
    for _ in range(3):  # another run may remove the empty folder between our mkdir and our write
        for path in (os.path.dirname(folder), folder):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            why = refusal(path)
            if why is not None:
                raise OSError(f"{why}: not a private folder of this user")
        _remove_stale(folder)
        path = os.path.join(folder, name)
        try:
            _write_entry(f"{path}.tmp", run_dir)
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


def _write_entry(path: str, run_dir: str) -> None:
    try:
        os.unlink(path)  # a half-written entry of a run that was killed with this pid and start time: none
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, run_dir.encode())
    finally:
        os.close(fd)


def _remove_stale(folder: str) -> None:
    """Entries (and half-written ones) of roots that ended without removing theirs: killed."""
    with os.scandir(folder) as entries:
        for count, entry in enumerate(entries):
            if count >= STALE_LIMIT:
                return
            pid, _, start = entry.name.partition(".")[0].partition("-")
            if pid.isdigit() and start.isdigit() and entry_name(int(pid)) != f"{pid}-{start}":
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass
