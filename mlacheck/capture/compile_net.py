"""A net under every compile of a kernel DSL: its compile entry point (a rule file's `[[compile_net]]`, e.g. CuTe DSL's
`CompileCallable.__call__`, which `cute.compile(...)` and `cute.compile[options](...)` both reach) is wrapped once per
process, beneath any wrapper a program put on top (vLLM's JIT monitor chains onto it unchanged).

A compile that no watched family accounts for (no family's compile runs in this thread: `compile_timer.watching`) is
an unwatched compile: a `compile_start` event before it (a process that dies in it leaves that), a `compile_end`
and one `unwatched_compile` event after it with the kernel (its function, or its class and the object's
scalar configuration), what it was compiled for (each argument's type, dtype, shape and layout where it is a tensor),
its seconds, its phase (`phase`: warm-up or capture under the engines' frames; serving once the process marked serving
start; else unknown, since a net cannot tell whether a dispatch call made it) and its site. Where launches are replaced (--dry, trace mode: kernels built for a target arch the
device may not run), what the unwatched compile returns launches nothing when called (`NotLaunched`). Capture never
raises into the program: a failure is an internal error.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import sys
import time

from mlacheck import events, sinks
from mlacheck.capture import compile_timer, outputs, phase
from mlacheck.capture.install import Patches
from mlacheck.capture.stack import StackReader
from mlacheck.keys import typed
from mlacheck.rulefiles.plain import CompileNet, PhaseRule
from mlacheck.sinks import EventSink

LONG_TEXT = 200  # characters of a text argument beyond which the key holds its digest, not the text
MAX_FIELDS = 48  # of a kernel object's configuration: its scalar attributes, in the object's own order
SCALARS = (bool, int, float, str, type(None))


class CompileNetCapture:
    """One compile entry point, watched in one process."""

    def __init__(
        self, net: CompileNet, sink: EventSink, phases: tuple[PhaseRule, ...] = (), replace_launch: bool = False
    ) -> None:
        self.net, self.sink, self.replace_launch = net, sink, replace_launch
        self._reader = StackReader(frozenset(), phases, tuple(net.site_skip))
        self._patches = Patches(net.label, where=net.module)
        self._serving = False
        self._built: set[str] = set()  # (a net with an `output` folder) the keys of the calls that returned
        self.installed = False

    def install(self, module: object) -> None:
        owner, attribute = self._patches.function(self.net.qualname, module)
        original = getattr(owner, attribute)
        method = inspect.isclass(owner)
        began, ended, replace = self._began, self._ended, self.replace_launch
        self._signature = _signature(original) if self.net.kernel or self.net.output else None
        self._positional = _positional(self._signature)

        @functools.wraps(original)
        def compile_watched(*args: object, **kwargs: object) -> object:
            if compile_timer.watching():
                return original(*args, **kwargs)
            start = began(args, kwargs, method, sys._getframe(1))
            started = time.perf_counter()
            try:
                with compile_timer.watched_compile():  # a net beneath this one (a build's own compiles) leaves it here
                    result = original(*args, **kwargs)
            except BaseException as exc:
                ended(start, time.perf_counter() - started, type(exc).__name__)
                raise
            ended(start, time.perf_counter() - started, None)
            return NotLaunched(result) if replace else result

        self._patches.replace(owner, attribute, compile_watched)
        self.installed = True

    def follow(self) -> None:
        """The module ran again (reloaded, or imported again as a new module object): its entry point is a new
        function, netted too (a failure is an internal error; the exit check says what went past the net)."""
        if not self.installed:
            return
        try:
            module = self._patches.import_module(self.net.module)
            if not self._patches.holds(*self._patches.function(self.net.qualname, module)):
                self.install(module)
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            sinks.write_internal_error(self.sink, f"{self.net.label} compile net", exc)

    def remove(self) -> None:
        """Say what went past the net (its entry point rebound, or its module imported again unfollowed): an `unseen`
        line each, so the run cannot pass on compiles it could not see; then give the entry point back."""
        for line in self._patches.moved():
            self.sink.write(events.unseen_event(self.net.label, line, net=True))
        self._patches.undo(lambda where, action: action())
        self.installed = False

    def serving_started(self) -> None:
        self._serving = True

    def phase_changed(self) -> None:
        """The phase is read from the stack at each compile."""

    def after_fork(self) -> None:
        """A forked child keeps what its parent marked."""

    def _began(self, args: tuple, kwargs: dict, method: bool, frame) -> tuple | None:
        """The compile's `compile_start`, written before it runs: (its id, its phase, where, the kernel's name, what
        its key is read from once it returned, what its output folder held), or None where that failed (an internal
        error)."""
        try:
            where = self._reader.read(frame)
            decided = phase.decide(where.phase, self._serving, None)
            if self.net.kernel:
                subject, kernel = self._named(self.net.kernel, args, kwargs)
                rest = args[1:] if method else args
            else:
                given = args[1:] if method else args
                subject = kernel = given[0] if given else kwargs.get("function")
                rest = given[1:]
            name = kernel if isinstance(kernel, str) else kernel_name(kernel)
            folder = self._named(self.net.output, args, kwargs)[1] if self.net.output else None
            event = events.compile_start_event(decided, where.site, where.stack, net=self.net.label, kernel=name)
            self.sink.write(event)
            return event["id"], decided, where, name, subject, args, rest, kwargs, folder, outputs.listing(folder)
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            sinks.write_internal_error(self.sink, f"{self.net.label} compile net", exc)
            return None

    def _ended(self, start: tuple | None, seconds: float, raised: str | None) -> None:
        """The compile's `compile_end`, and its `unwatched_compile` event (one that raised too: the caller waited for
        it all the same), unless it built nothing: its key returned earlier in this process and its output folder is
        as it was (a load of what was built then: `cached`)."""
        if start is None:
            return
        started, decided, where, name, subject, args, rest, kwargs, folder, before = start
        outcome = "returned" if raised is None else "raised"
        try:
            key = {**configuration(subject), **arguments(rest, kwargs, self._positional[len(args) - len(rest) :])}
            if raised is None and self._loaded(key, folder, before):
                outcome = "cached"
        except Exception as exc:  # noqa: BLE001 - the compile is recorded all the same, without its key
            sinks.write_internal_error(self.sink, f"{self.net.label} compile net", exc)
            key = {}
        try:
            self.sink.write(events.compile_end_event(started, seconds, outcome))
            if outcome != "cached":
                self.sink.write(
                    events.unwatched_compile_event(
                        self.net.label, name, key, seconds, decided, where.site, where.stack, raised=raised
                    )
                )
        except Exception as exc:  # noqa: BLE001
            sinks.write_internal_error(self.sink, f"{self.net.label} compile net", exc)

    def _loaded(self, key: dict, folder: object, before: frozenset | None) -> bool:
        """Whether a call that returned built nothing (a net with `output`): its key returned earlier in this process
        and nothing in its output folder changed. Otherwise its key is remembered."""
        if not self.net.output:
            return False
        seen = json.dumps(key, sort_keys=True, default=str)
        if seen in self._built and outputs.unchanged(before, outputs.listing(folder)):
            return True
        self._built.add(seen)
        return False

    def _named(self, path: str, args: tuple, kwargs: dict) -> tuple[object, object]:
        """The parameter a rule's path (`kernel`, `output`) starts at, and what the path reads from it (`self.name`)."""
        parameter, *attributes = path.split(".")
        subject = value = self._signature.bind(*args, **kwargs).arguments[parameter]
        for attribute in attributes:
            value = getattr(value, attribute)
        return subject, value


def _signature(function: object) -> inspect.Signature:
    return inspect.signature(function)


def _positional(signature: inspect.Signature | None) -> tuple[str, ...]:
    """The names of the parameters an entry point's positional arguments fill, in order (none where it is not read)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in signature.parameters.values() if p.kind in kinds) if signature is not None else ()


class NotLaunched:
    """An unwatched compiled kernel where launches are replaced: a call launches nothing and returns None; anything
    else is the kernel's own."""

    def __init__(self, kernel: object) -> None:
        self._kernel = kernel

    def __call__(self, *args: object, **kwargs: object) -> None:
        return None

    def __getattr__(self, name: str) -> object:
        return getattr(self._kernel, name)


def kernel_name(kernel: object) -> str:
    """module.qualname of a kernel function, of a kernel object's class, or of a bound method (its object's class)."""
    owner = getattr(kernel, "__self__", None)
    if owner is not None:
        return f"{type(owner).__module__}.{type(owner).__qualname__}.{getattr(kernel, '__name__', '?')}"
    named = kernel if hasattr(kernel, "__qualname__") else type(kernel)
    return f"{getattr(named, '__module__', '?')}.{named.__qualname__}"


def configuration(kernel: object) -> dict[str, object]:
    """A kernel object's scalar configuration (its public attributes that are scalars, types or tuples of those)."""
    subject = getattr(kernel, "__self__", kernel)
    if inspect.isfunction(subject) or not hasattr(subject, "__dict__"):
        return {}
    fields = {}
    for name, value in vars(subject).items():
        if not name.startswith("_") and _plain(value):
            fields[name] = _argument(value)
            if len(fields) == MAX_FIELDS:
                break
    return fields


def _plain(value: object) -> bool:
    if isinstance(value, tuple):
        return all(_plain(item) for item in value)
    return isinstance(value, SCALARS) or isinstance(value, type)


def arguments(args: tuple, kwargs: dict, names: tuple[str, ...] = ()) -> dict[str, object]:
    """What each compile argument was: a tensor's dtype, shape and layout; a scalar's value; a build's source files,
    what they hold; else its type. A positional argument is named by its parameter where `names` has it, else by its
    position (`arg1`: one of `*args`)."""
    named = {names[index - 1] if index <= len(names) else f"arg{index}": value for index, value in enumerate(args, 1)}
    named.update((name, value) for name, value in kwargs.items() if name != "options")
    return {name: _argument(value) for name, value in named.items()}


def _argument(value: object) -> object:
    if isinstance(value, str) and len(value) > LONG_TEXT:  # a generated source or build file: its size and digest
        return f"{len(value)} characters, sha256 {hashlib.sha256(value.encode(errors='replace')).hexdigest()[:16]}"
    if isinstance(value, (list, tuple)) and value and all(isinstance(item, str) for item in value):
        files = all(map(os.path.isfile, value)) and outputs.files_digest(value)  # a build's sources: what they hold
        return files or typed(value)
    if _plain(value):
        return typed(value)
    shape = _read(value, "shape")
    if shape is not None:
        dtype = _read(value, "dtype") or _read(value, "element_type")
        layout = _read(value, "layout")
        stride = _read(value, "stride")
        if callable(stride):
            stride = _read(value, "stride", call=True)
        return " ".join(
            part
            for part in (
                str(typed(dtype)) if dtype is not None else "",
                _text(shape),
                f"layout {layout}" if layout is not None else f"stride {_text(stride)}" if stride is not None else "",
            )
            if part
        )
    return type(value).__name__


def _read(value: object, name: str, call: bool = False) -> object:
    """An attribute of a compile argument, or None where reading it raises (a CuTe DSL runtime tensor has no layout)."""
    try:
        attribute = getattr(value, name, None)
        return attribute() if call else attribute
    except Exception:  # noqa: BLE001 - an argument that cannot say is described by what it can
        return None


def _text(value: object) -> str:
    try:
        return str(tuple(value))
    except TypeError:
        return str(value)
