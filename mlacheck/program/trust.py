"""Who may write a run folder: its user alone. What runs in every process of a run (the agent) takes what to do
from the folder, so a folder that someone else can write is never joined, and mlacheck writes into a folder only
files it creates, never through a link and never over a file it did not make. Of the folder's capture configuration,
a process takes only the environment variables the rules read and mlacheck's own, and mlacheck's own watchers.

Imported by every observed process: the standard library, mlacheck_startup, mlacheck.events and the layout only.
"""

from __future__ import annotations

import os
import stat

from mlacheck.errors import MlacheckError
from mlacheck.program.layout import ENV_PREFIX
from mlacheck.sinks import replace_file
from mlacheck_startup import refusal

NEVER_PREFIXES = ("LD_", "DYLD_", "PYTHON")  # what the dynamic loader and the interpreter load and run
NEVER_NAMES = frozenset({"PATH", "BASH_ENV", "ENV", "IFS", "SHELLOPTS", "PERL5LIB", "PERL5OPT", "NODE_OPTIONS"})


class UntrustedFolder(MlacheckError):
    """A run folder this user does not own alone (or that is gone): nothing in it is read, nothing written."""


def check_folder(path: str | os.PathLike, what: str = "run folder") -> None:
    """UntrustedFolder, saying why in one line, unless `path` is a folder of this user's that no one else can write
    (never a link)."""
    why = refusal(path)
    if why is not None:
        raise UntrustedFolder(f"{what} {why}; mlacheck uses only a folder of this user's that no one else can write")


def write_new(folder: str | os.PathLike, name: str, data: bytes) -> None:
    """Write `name` in `folder` whole: into a file created exclusively beside it, then renamed over it (a link or a
    file someone else put there is replaced, never written through: `sinks.replace_file`, which a process's counts
    checkpoint is written by too). OSError where the folder cannot take it."""
    replace_file(os.path.join(folder, name), data)


def write_note(path: str | os.PathLike, text: str) -> bool:
    """Add `text` to a note of this process's (created exclusively where new, appended to where this user's regular
    file is there already, never through a link); False where it cannot be written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return False
        os.write(fd, text.encode())
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def allowed_environment(config: dict) -> dict[str, str]:
    """The variables of capture.json's "environment" a process may take: those the loaded rules read the target arch
    or SM count from (arch_env, sm_count_env) and mlacheck's own, never one that changes what a process loads or
    runs (LD_*, PYTHON*, PATH, BASH_ENV, ...)."""
    read = set(config.get("arch_env") or [])
    for data in config.get("families") or []:
        family = data.get("family") if isinstance(data, dict) else None
        read |= set(family.get("sm_count_env") or []) if isinstance(family, dict) else set()
    given = config.get("environment")
    return {
        name: value
        for name, value in (given.items() if isinstance(given, dict) else ())
        if isinstance(name, str)
        and isinstance(value, str)
        and (name in read or name.startswith(ENV_PREFIX))
        and name.isupper()
        and name.replace("_", "").isalnum()
        and not name.startswith(NEVER_PREFIXES)
        and name not in NEVER_NAMES
    }


def own_watcher(watcher: object) -> bool:
    """Whether a watcher capture.json names is one of mlacheck's own modules (no other is loaded)."""
    capture = watcher.get("capture") if isinstance(watcher, dict) else None
    return isinstance(capture, str) and capture.partition(":")[0].startswith("mlacheck.")
