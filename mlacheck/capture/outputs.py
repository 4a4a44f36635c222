"""What a build's output folder holds, to tell a build that built something from one that found its output current
(torch's cpp_extension asked again for an extension its versioner finds unchanged runs no build; ninja with nothing
stale runs no compiler): each file under the folder by its path, inode, size and modification time. Ninja's own logs
and a build's lock file are not output. A folder that cannot be listed whole (unreadable, or too large to list at
each build) compares as changed: the build is counted as a compile, never as a load it may not have been."""

from __future__ import annotations

import hashlib
import os

MAX_FILES = 20_000  # listed per build at most; a larger folder is not compared
NOT_OUTPUT = frozenset(("lock", ".ninja_log", ".ninja_deps"))


def listing(folder: object) -> frozenset | None:
    """The files under `folder` now (an empty set where it does not exist yet), or None where it cannot be told."""
    if not isinstance(folder, (str, os.PathLike)):
        return None
    found, pending = [], [os.fspath(folder)]
    try:
        while pending:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.name not in NOT_OUTPUT:
                        status = entry.stat(follow_symlinks=False)
                        found.append((entry.path, status.st_ino, status.st_size, status.st_mtime_ns))
                    if len(found) > MAX_FILES:
                        return None
    except FileNotFoundError:
        if not found and not os.path.lexists(folder):
            return frozenset()
        return None
    except OSError:
        return None
    return frozenset(found)


def unchanged(before: frozenset | None, after: frozenset | None) -> bool:
    """Whether the folder is known to hold what it held before (None on either side: not known)."""
    return before is not None and after is not None and before == after


def files_digest(paths: list | tuple) -> str | None:
    """`N file(s), sha256 DIGEST` of the files a build compiles, by their paths and contents (as torch's versioner
    hashes its sources), or None where one is not a readable file."""
    digest = hashlib.sha256()
    try:
        for path in paths:
            with open(path, "rb") as file:
                digest.update(os.fsencode(os.path.abspath(path)) + b"\0" + file.read() + b"\0")
    except (OSError, TypeError, ValueError):
        return None
    return f"{len(paths)} file(s), sha256 {digest.hexdigest()[:16]}"
