"""Reading the call stack: is this inside a dispatch call, under a warm-up or capture frame, and where is the site.

Frames are recognised by their code object (dispatch functions, by id: hashing a code object hashes its
bytecode) or by module `__name__` and qualified name (engine functions named in rule files, which need
not be imported yet). The site of an event is the first frame outside the kernel's own package, the
packages a rule names as wrappers, and mlacheck's instrumentation, so it lands in the user's code (in the
embedded scenario, the scenario's code that plays the engine); where no frame is left, it is the innermost
frame outside the instrumentation.
"""

from __future__ import annotations

import functools
import os
import sys
from collections import namedtuple
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an annotation only
    from mlacheck.rulefiles.plain import PhaseRule

STACK_DEPTH = 12
INSTRUMENTATION = ("mlacheck.capture", "mlacheck.program", "mlacheck.cli", "mlacheck.pytest_plugin")


class Where(namedtuple("Where", "dispatch_depth dispatch_code dispatch_frame phase site stack")):
    """What the stack says about one cache access: `dispatch_depth`, the frames from the access to the dispatch
    function's frame (None outside any dispatch); `dispatch_code` and `dispatch_frame`, that frame's code object and
    the frame (read on a slow path only); `phase`, "capture" or "warmup" under such a frame, else None; `site`; and
    `stack`. A named tuple: a frozen dataclass takes a millisecond to make in every observed process."""

    __slots__ = ()


class StackReader:
    """Classifies cache accesses for one family."""

    def __init__(self, dispatch_code_ids: frozenset[int], frames: tuple[PhaseRule, ...], skip: tuple[str, ...]) -> None:
        self.dispatch_code_ids = dispatch_code_ids
        self._frames: dict[str, list[PhaseRule]] = {}
        for frame in frames:
            self._frames.setdefault(frame.qualname.rpartition(".")[2], []).append(frame)
        self._skip = _Packages(tuple(skip) + INSTRUMENTATION)

    def read(self, frame: FrameType | None) -> Where:
        """Walk outward from `frame` (the caller of the cache operation)."""
        depth, dispatch_depth, dispatch_code, dispatch_frame, phase, site, fallback = (
            0,
            None,
            None,
            None,
            None,
            None,
            None,
        )
        stack: list[str] = []
        cwd = None  # (read once a stack read, where a site is made: each frame's site is relative to it)
        while frame is not None:
            code = frame.f_code
            if dispatch_depth is None and id(code) in self.dispatch_code_ids:
                dispatch_depth, dispatch_code, dispatch_frame = depth, code, frame
            if phase != "capture":
                phase = self._phase(frame) or phase
            module = frame.f_globals.get("__name__") or ""
            if fallback is None and not _INSTRUMENTATION.holds(module):
                fallback = frame
            if (site is None or len(stack) < STACK_DEPTH) and not self._skip.holds(module):
                cwd = os.getcwd() if cwd is None else cwd
                here = frame_site(frame, cwd)
                if site is None:
                    site = here
                if len(stack) < STACK_DEPTH:
                    stack.append(f"{here} {getattr(code, 'co_qualname', code.co_name)}")
            frame = frame.f_back
            depth += 1
        if site is None and fallback is not None:
            site = frame_site(fallback, cwd)
        return Where(dispatch_depth, dispatch_code, dispatch_frame, phase, site, stack)

    def _phase(self, frame: FrameType) -> str | None:
        candidates = self._frames.get(frame.f_code.co_name)
        if not candidates:
            return None
        module = frame.f_globals.get("__name__")
        qualname = getattr(frame.f_code, "co_qualname", None)  # Python 3.10 has the name only
        for candidate in candidates:
            if candidate.module == module and qualname in (None, candidate.qualname):
                return candidate.phase
        return None


class _Packages:
    """Modules of some packages: each package's own and those under it (`holds`: one test of a set, one of str.startswith,
    for each frame of a stack read)."""

    __slots__ = ("names", "prefixes")

    def __init__(self, packages: tuple[str, ...]) -> None:
        self.names, self.prefixes = frozenset(packages), tuple(f"{package}." for package in packages)

    def holds(self, module: str) -> bool:
        return module in self.names or module.startswith(self.prefixes)


_INSTRUMENTATION = _Packages(INSTRUMENTATION)


def frame_site(frame: FrameType, cwd: str | None = None) -> str:
    """`file:line` of a frame, with site-packages and the current folder (`cwd`, default: now's) cut off the path."""
    return f"{short_path(frame.f_code.co_filename, cwd)}:{frame.f_lineno}"


def short_path(path: str, cwd: str | None = None) -> str:
    """A path relative to site-packages (an installed package), the working folder (`cwd`, default: now's), or an
    import root."""
    return _short_path(path, os.getcwd() if cwd is None else cwd)


@functools.lru_cache(maxsize=4096)
def _short_path(path: str, cwd: str) -> str:
    """`short_path` once per file and working folder (resolving a path is most of a slow-path stack read)."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path[path.rindex(marker) + len(marker) :]
    try:
        return str(Path(path).resolve().relative_to(Path(cwd).resolve()))
    except (ValueError, OSError):
        pass
    path = os.path.normpath(os.path.join(cwd, path))  # (a script run as ../x.py has its `..` in its file name)
    roots = [entry for entry in sys.path if entry and os.path.isabs(entry) and path.startswith(entry.rstrip("/") + "/")]
    return path[len(max(roots, key=len).rstrip("/")) + 1 :] if roots else path
