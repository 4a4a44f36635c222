"""Capture: hooks that watch one kernel family's compile cache and write events.

The one sure meeting point of warm-up and dispatch is the cache dict both of them read and write, so
mlacheck puts a `RecordingCache` (a dict subclass holding the same entries) in the module's place and
wraps the module's compile function to time it. Whether an access happens inside a dispatch call is
read from the call stack (the dispatch functions' code objects), so it holds however the caller got the
function (re-export, saved reference). Everything is undone by `FamilyCapture.remove`, which hands the
module its original dict back with every compiled entry in it. Hooks never raise into the program.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import FrameType

from mlacheck.errors import MlacheckError
from mlacheck.events import EventSink
from mlacheck.rules import Family

LaunchPolicy = Callable[[list[str], object], object]
"""Maps (key, compiled kernel) of a dispatch's lookup to what the dispatch gets back and launches."""


def field_string(value: object) -> str:
    """A key field as the report writes it: torch dtypes without the `torch.` prefix."""
    text = str(value)
    return text[len("torch."):] if text.startswith("torch.") else text


def key_strings(key: object) -> list[str]:
    """A cache key as a list of field strings."""
    return [field_string(part) for part in key] if isinstance(key, tuple) else [field_string(key)]


def call_site(frame: FrameType) -> str:
    """`file:line` of a frame, with site-packages and the current folder cut off the path."""
    path = frame.f_code.co_filename
    marker = "site-packages/"
    if marker in path:
        path = path[path.rindex(marker) + len(marker):]
    else:
        try:
            path = str(Path(path).resolve().relative_to(Path.cwd()))
        except ValueError:
            pass
    return f"{path}:{frame.f_lineno}"


class SkippedCompile:
    """Stands in for a compiled kernel under `--compile skip`: the key is recorded, nothing is compiled."""

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("mlacheck --compile skip: this variant was not compiled, it cannot launch")


class RecordingCache(dict):
    """A dict that reports inserts and lookups to its `FamilyCapture` and otherwise behaves as a dict."""

    def __init__(self, entries: dict, capture: FamilyCapture) -> None:
        super().__init__(entries)
        self._capture = capture

    def __setitem__(self, key: object, value: object) -> None:
        dict.__setitem__(self, key, value)
        self._capture.on_insert(key, value, sys._getframe(1))

    def setdefault(self, key: object, default: object = None) -> object:
        if key not in self:
            self[key] = default
        return self[key]

    def __getitem__(self, key: object) -> object:
        return self._capture.on_lookup(key, dict.__getitem__(self, key), sys._getframe(1))

    def get(self, key: object, default: object = None) -> object:
        if not super().__contains__(key):
            return default
        return self._capture.on_lookup(key, super().__getitem__(key), sys._getframe(1))


class FamilyCapture:
    """Installs and removes the hooks of one kernel family and turns what they see into events."""

    def __init__(self, family: Family, sink: EventSink, compile_policy: str = "real", launch: LaunchPolicy | None = None):
        self.family = family
        self.sink = sink
        self.compile_policy = compile_policy
        self.launch = launch
        self._module = None
        self._original_cache: dict | None = None
        self._original_compile = None
        self._dispatch_code_ids: frozenset[int] = frozenset()
        self._compile_seconds: dict[int, tuple[object, float]] = {}
        self._key_strings: dict[object, list[str]] = {}
        self._dispatch_events: dict[object, dict] = {}

    # -- install / remove -------------------------------------------------------------------------
    def install(self) -> None:
        """Put the recording cache and the compile wrapper in place and write the `family` event."""
        family = self.family
        module = self._import_module()
        cache = self._attribute(module, family.cache)
        if not isinstance(cache, dict):
            raise MlacheckError(f"{family.name}: {family.module}.{family.cache} is a {type(cache).__name__}, not a dict: {self._stale_advice()}")
        if isinstance(cache, RecordingCache):
            raise MlacheckError(f"{family.name}: {family.module}.{family.cache} is already being recorded; install mlacheck once per process")
        compile_function = self._attribute(module, family.compile)
        # by id: hashing a code object hashes its bytecode and constants on every lookup
        self._dispatch_code_ids = frozenset(id(inspect.unwrap(self._attribute(module, name)).__code__) for name in family.dispatch)
        self.sink.write({"type": "family", "family": family.name, "version": self._installed_version(), "key_fields": family.key_fields})
        self._module, self._original_cache, self._original_compile = module, cache, compile_function
        recording = RecordingCache(cache, self)
        for key in cache:
            self._write_compile(key, "precompile", None, "before mlacheck")
        setattr(module, family.cache, recording)
        setattr(module, family.compile, self._timed_compile)

    def remove(self) -> None:
        """Undo `install`: the module gets its own dict back, holding every variant that was really compiled."""
        if self._module is None:
            return
        module, original = self._module, self._original_cache
        recording = getattr(module, self.family.cache)
        bypassed = [key for key in original if not dict.__contains__(recording, key)]
        if bypassed:
            self._internal_error(
                "remove",
                f"{len(bypassed)} variant(s) entered {self.family.module}.{self.family.cache} through a reference "
                "taken before mlacheck was installed; they are missing from this report",
            )
        original.update({key: value for key, value in dict.items(recording) if not isinstance(value, SkippedCompile)})
        setattr(module, self.family.cache, original)
        setattr(module, self.family.compile, self._original_compile)
        self._module = None
        self._compile_seconds.clear()

    # -- hooks --------------------------------------------------------------------------------------
    def _timed_compile(self, *args: object, **kwargs: object) -> object:
        if self.compile_policy == "skip":
            return SkippedCompile()
        started = time.perf_counter()
        kernel = self._original_compile(*args, **kwargs)
        self._compile_seconds[id(kernel)] = (kernel, time.perf_counter() - started)
        return kernel

    def on_insert(self, key: object, value: object, frame: FrameType) -> None:
        try:
            timed = self._compile_seconds.pop(id(value), None)
            seconds = timed[1] if timed is not None and timed[0] is value else None
            dispatch_frame = self._dispatch_frame(frame)
            if dispatch_frame is None:
                self._write_compile(key, "precompile", seconds, call_site(frame))
            else:  # the site of a serving-path compile is the line that called the dispatch function
                caller = dispatch_frame.f_back
                self._write_compile(key, "dispatch", seconds, call_site(caller) if caller else None)
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            self._internal_error("insert", exc)

    def on_lookup(self, key: object, value: object, frame: FrameType) -> object:
        try:
            # the hot path: a dispatch function looking its variant up itself
            if id(frame.f_code) not in self._dispatch_code_ids and self._dispatch_frame(frame.f_back) is None:
                return value
            event = self._dispatch_events.get(key)
            if event is None:
                event = self._dispatch_events[key] = {"type": "dispatch", "family": self.family.name, "key": self._strings(key)}
            self.sink.write_cached(event)
            return value if self.launch is None else self.launch(event["key"], value)
        except Exception as exc:  # noqa: BLE001
            self._internal_error("lookup", exc)
            return value

    # -- helpers --------------------------------------------------------------------------------------
    def _dispatch_frame(self, frame: FrameType | None) -> FrameType | None:
        """The innermost frame of a dispatch function on the stack, or None outside any dispatch call."""
        code_ids = self._dispatch_code_ids
        while frame is not None:
            if id(frame.f_code) in code_ids:
                return frame
            frame = frame.f_back
        return None

    def _strings(self, key: object) -> list[str]:
        strings = self._key_strings.get(key)
        if strings is None:
            strings = self._key_strings[key] = key_strings(key)
        return strings

    def _write_compile(self, key: object, phase: str, seconds: float | None, site: str | None) -> None:
        self.sink.write({"type": "compile", "family": self.family.name, "key": self._strings(key),
                         "phase": phase, "seconds": seconds, "site": site})

    def _internal_error(self, where: str, error: object) -> None:
        try:
            self.sink.write({"type": "internal_error", "where": f"{self.family.name}: {where}", "message": str(error)})
        except Exception:  # noqa: BLE001 - the sink itself failed; nothing left to tell
            pass

    def _import_module(self):
        try:
            return importlib.import_module(self.family.module)
        except ImportError as exc:
            raise MlacheckError(
                f"{self.family.name}: cannot import {self.family.module} ({exc}); install {self.family.distribution}"
            ) from None

    def _attribute(self, module: object, name: str) -> object:
        try:
            return getattr(module, name)
        except AttributeError:
            raise MlacheckError(f"{self.family.name}: {self.family.module} has no {name!r}: {self._stale_advice()}") from None

    def _installed_version(self) -> str | None:
        try:
            return metadata.version(self.family.distribution)
        except metadata.PackageNotFoundError:
            return None

    def _stale_advice(self) -> str:
        return (
            f"the rule was checked against {self.family.distribution} {self.family.checked_versions}, "
            f"installed is {self._installed_version()}; update the rule file"
        )
