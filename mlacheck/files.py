"""Reading files that may be hostile (a run folder another user or a broken program wrote into, a baseline, a saved
report): only a regular file (never a FIFO, a device or a directory, which could hang or exhaust the reader), inside a
run folder never through a symbolic link, and never more than a stated size. Each refusal is one line (MlacheckError)
that names the file and says what to do."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

from mlacheck.errors import MlacheckError

KIB, MIB = 1 << 10, 1 << 20
DOCUMENT_LIMIT = 64 * MIB  # meta.json, processes.json, capture.json, a baseline
REPORT_LIMIT = 512 * MIB  # a saved JSON report
NOTE_LIMIT = 64 * KIB  # unobserved-<pid>.txt, <trace>.lost
RULES_LIMIT = 4 * MIB  # a saved rule file
KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
}


def open_regular(path: str | os.PathLike, follow: bool = False) -> io.BufferedReader:
    """`path` opened for reading, if it is a regular file (`follow`: a symbolic link to one will do too).
    FileNotFoundError where there is nothing; MlacheckError for anything else that is not a readable regular file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise MlacheckError(f"{path}: a symbolic link; mlacheck reads only the regular files it wrote") from None
        raise MlacheckError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
        raise MlacheckError(f"{path}: {kind}, not a regular file; mlacheck reads only the regular files it wrote")
    return os.fdopen(fd, "rb")


def read_bytes(path: str | os.PathLike, limit: int, follow: bool = False) -> bytes:
    """The whole of a regular file of at most `limit` bytes (FileNotFoundError where there is none)."""
    with open_regular(path, follow) as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise MlacheckError(f"{path}: larger than {_size(limit)}; it is not a file mlacheck wrote")
    return data


def read_json(path: str | os.PathLike, limit: int = DOCUMENT_LIMIT, what: str = "JSON", follow: bool = False):
    """A JSON document of at most `limit` bytes; malformed or too deeply nested is one line (FileNotFoundError where
    there is none)."""
    data = read_bytes(path, limit, follow)
    try:
        return json.loads(data)
    except RecursionError:
        raise MlacheckError(f"{path}: not {what}: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise MlacheckError(f"{path}: not {what}: {' '.join(str(exc).split())}") from None


def read_note(path: str | os.PathLike) -> str | None:
    """A short note's text (None where there is none); a note that is not a small regular file is refused."""
    try:
        return read_bytes(path, NOTE_LIMIT).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None


def regular_files(folder: Path, pattern: str) -> list[Path]:
    """The entries of `folder` matching `pattern`; one that is not a regular file is refused (MlacheckError)."""
    found = []
    for path in sorted(folder.glob(pattern)):
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            kind = KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            raise MlacheckError(f"{path}: {kind}, not a regular file; mlacheck reads only the regular files it wrote")
        found.append(path)
    return found


def _size(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit >= MIB else f"{limit // KIB} KiB"
