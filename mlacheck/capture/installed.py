"""What the installed distributions answer, asked once: which distributions provide a package, a distribution's
version, which distribution installed a module's file. importlib.metadata answers each by reading every
distribution's metadata (tens of milliseconds, and its own import), and every observed process that imports a watched
library asks the same questions, so each answer is kept for the process, and shared between the processes of a run
through a file (`share`: the agent names one in the run folder).

A shared file holds answers for one installation only: the distributions' metadata folders in each sys.path entry
and the finders that list distributions (`installation`). Installing, reinstalling or removing a distribution adds
or replaces or removes such a folder, so a process that sees another installation asks again and keeps its answers
in another file. An answer about a module's file is kept under the file's identity (path, device, inode, size,
modification time). A shared file that is missing, unreadable or not what this module wrote is
ignored; one that cannot be written loses nothing but the time.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

from mlacheck import schemas
from mlacheck.files import read_json
from mlacheck.sinks import replace_file

FORMAT = "installed answers"
INFO = (".dist-info", ".egg-info")
LIMIT = 1 << 20
SHAPES: dict[str, Callable[[object], bool]] = {  # a question's first word -> what its answer must look like
    "distributions": lambda value: isinstance(value, list) and all(isinstance(name, str) for name in value),
    "providers": lambda value: isinstance(value, list) and all(isinstance(name, str) for name in value),
    "version": lambda value: value is None or isinstance(value, str),
    "file": lambda value: (
        isinstance(value, list)
        and len(value) == 3
        and all(part is None or isinstance(part, str) for part in value[:2])
        and isinstance(value[2], bool)
    ),
}

_answers: dict[str, object] = {}
_shared: dict = {"path_for": None, "path": None, "installation": None, "loaded": False, "held": False}


def share(path_for: Callable[[str], str]) -> None:
    """Share answers through the file `path_for(digest of the installation)` (read at the first question)."""
    _shared.update(path_for=path_for, path=None, installation=None, loaded=False)


def at_once(ask: Callable[[], None]) -> None:
    """Call `ask`, the answers it gets written to the shared file once, as it returns, not once each (each write
    reads the installation and the file again)."""
    _shared["held"] = True
    try:
        ask()
    finally:
        _shared["held"] = False
        _save()


def answer(question: str, ask: Callable[[], object]) -> object:
    """The answer to `question` ("version NAME", "distributions PACKAGE", "providers PACKAGE", "file PATH ..."): kept,
    shared, or asked now (and then kept and shared)."""
    if not _shared["loaded"]:
        _shared["loaded"] = True
        _load()
    if question in _answers:
        return _answers[question]
    value = _answers[question] = ask()
    if not _shared["held"]:
        _save()
    return value


def file_question(path: str) -> str | None:
    """The question about a module's file, naming its identity (None where it cannot be read)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return f"file {path} {info.st_dev} {info.st_ino} {info.st_size} {info.st_mtime_ns}"


def installation() -> list:
    """What importlib.metadata reads the installation from: the distributions' metadata folders (*.dist-info,
    *.egg-info) in each sys.path entry that holds any, in order, each by name, inode and modification time (a
    reinstall makes a new folder; files written beside them, a log in the working folder, change nothing), a zip or an
    egg by its modification time; and the finders that list distributions. An entry that holds no distribution (a
    script's folder, mlacheck's bootstrap, one that does not exist) or comes again (by its absolute path) lists none,
    so the supervisor, whose sys.path differs from its program's in such entries only, can answer for the program's
    processes ahead (`watch.ask_ahead`); an entry that gains one is named from then on."""
    entries = []
    for entry in dict.fromkeys(os.path.abspath(str(entry) or ".") for entry in sys.path):  # "" is the working folder
        try:
            if entry.endswith(".egg"):  # its metadata is inside it (EGG-INFO)
                raise NotADirectoryError
            with os.scandir(entry) as children:
                found = sorted(_folder(child) for child in children if child.name.lower().endswith(INFO))
        except NotADirectoryError:
            found = _modified(entry)
        except (OSError, ValueError):
            found = None
        if found:
            entries.append([entry, found])
    finders = [_name(finder) for finder in sys.meta_path if hasattr(finder, "find_distributions")]
    return [entries, finders]


def _folder(child: os.DirEntry) -> list:
    try:
        return [child.name, child.inode(), child.stat(follow_symlinks=False).st_mtime_ns]
    except OSError:
        return [child.name, None, None]


def _modified(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except (OSError, TypeError, ValueError):
        return None


def _name(finder: object) -> str:
    kind = finder if isinstance(finder, type) else type(finder)
    return f"{kind.__module__}.{kind.__qualname__}"


def _load() -> None:
    if _shared["path_for"] is None:
        return
    import zlib  # here: a process that installs no capture never asks

    state = installation()
    digest = zlib.crc32(json.dumps(state, separators=(",", ":")).encode())
    _shared.update(installation=state, path=_shared["path_for"](f"{digest:08x}"))
    _read()


def _read() -> None:
    """Keep the answers of the shared file that hold for this installation (those kept here win)."""
    try:
        data = read_json(_shared["path"], LIMIT)
    except Exception:  # noqa: BLE001 - none yet, or not one this module wrote: asked again
        return
    if not isinstance(data, dict) or data.get("format_version") != schemas.FORMATS[FORMAT].current:
        return
    answers = data.get("answers")
    if data.get("installation") != _shared["installation"] or not isinstance(answers, dict):
        return  # another installation's (the digest is short): asked again, and this one's written over it
    for question, value in answers.items():
        shape = SHAPES.get(question.partition(" ")[0]) if isinstance(question, str) else None
        if shape is not None and shape(value):
            _answers.setdefault(question, value)


def _save() -> None:
    """Write every answer kept to the shared file, with those another process wrote there since; not where the
    installation changed since the file was chosen (the answers may be of either)."""
    if _shared["path"] is None or installation() != _shared["installation"]:
        return
    _read()
    document = schemas.stamp(FORMAT, {"installation": _shared["installation"], "answers": _answers})
    try:
        replace_file(_shared["path"], json.dumps(document, separators=(",", ":")).encode())
    except OSError:
        pass
