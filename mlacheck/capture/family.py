"""FamilyCapture: installs one family's hooks and turns what they see into events.

Each cache key the process uses gets a variant number (vid). The first time a variant enters the cache,
and the first time it is looked up in each phase, an event is written at once; every other lookup only
steps a counter, and the counts are written as cumulative totals by `flush` (the agent calls it at a
bounded interval and at exit). A lookup outside any dispatch call is not a dispatch. Hooks never raise
into the program: a failure becomes an `internal_error` event.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType

from mlacheck.capture import compile_timer, hotpath
from mlacheck.capture.adapters import DICT_ADAPTERS, MISSING, FunctoolsAdapter, RecordingDict
from mlacheck.capture.compile_timer import SkippedCompile
from mlacheck.capture.hotpath import count_of
from mlacheck.capture.dispatch import wrap_dispatch
from mlacheck.capture.dry import DryStandIns
from mlacheck.capture.spec import CapturePolicy, CaptureSpec
from mlacheck.capture.stack import StackReader, Where
from mlacheck.errors import MlacheckError
from mlacheck.events import EventSink
from mlacheck.keys import typed

LaunchPolicy = Callable[[dict, object], object]
"""(typed key, compiled kernel) of a dispatch's lookup -> what the dispatch gets back and launches."""


def no_launch(*args: object, **kwargs: object) -> None:
    """The launch stand-in of `--dry`: nothing runs."""


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    """Top-level package -> the installed distributions that provide it; read once per process (it scans them all)."""
    from importlib import metadata

    return metadata.packages_distributions()


class FamilyCapture:
    """Capture of one kernel family in one process."""

    def __init__(self, spec: CaptureSpec, sink: EventSink, policy: CapturePolicy = CapturePolicy(),
                 launch: LaunchPolicy | None = None) -> None:
        self.spec, self.sink, self.policy = spec, sink, policy
        self.launch = launch if launch is not None else (lambda key, kernel: no_launch) if policy.replace_launch else None
        self.fast = hotpath.FastTable()  # variants seen in serving: key -> (counter, value to return)
        self.ticks = hotpath.counter()
        self.vids: dict[object, int] = {}
        self._described: list[tuple[dict, dict | None]] = []
        self._counters: dict[tuple[int, str], Iterator[int]] = {}
        self._calls: dict[str, Iterator[int]] = {}
        self._call_base: dict[str, int] = {}  # a forked child counts from what it inherited
        self._family_event: dict = {}
        self._first: set[tuple[int, str]] = set()
        self._errors: set[tuple] = set()
        self._stand_ins: dict[int, object] = {}
        self._written: dict | None = None
        self._flushed_at = time.monotonic()
        self._undo: list[Callable[[], None]] = []
        self._adapter: RecordingDict | FunctoolsAdapter | None = None
        self._timer: compile_timer.CompileTimer | None = None
        self._reader: StackReader | None = None
        self.installed = False

    # -- install / remove -------------------------------------------------------------------------------
    def install(self) -> None:
        """Put the adapter, the compile timer and the dispatch wrappers in place; write the `family` event.

        An install that fails (a stale rule, a failing sink) takes out what it had put in place, then raises."""
        try:
            self._install()
        except BaseException:
            self._undo_all()
            raise

    def _install(self) -> None:
        spec = self.spec
        module = self._import(spec.module)
        owner_path, _, attribute = spec.cache.rpartition(".")
        owner = self._resolve(module, owner_path) if owner_path else module
        cache = self._attribute(owner, attribute)
        dispatch = {name: self._attribute(module, name) for name in spec.dispatch}
        self._reader = StackReader(frozenset(id(inspect.unwrap(f).__code__) for f in dispatch.values()), spec.frames,
                                   (spec.module.partition(".")[0], *spec.site_skip))
        fingerprint = self.fingerprint(module)
        existing: list = []
        if spec.cache_kind == "functools":
            try:
                self._adapter = FunctoolsAdapter(cache, self, owner, attribute)
            except TypeError as exc:
                raise MlacheckError(f"{spec.family}: {spec.module}.{spec.cache}: {exc}: {self._stale_advice()}") from None
            existing, count = self._adapter.existing_keys()
            self._replace(owner, attribute, self._adapter.function)
        else:
            if not isinstance(cache, dict):
                raise MlacheckError(f"{spec.family}: {spec.module}.{spec.cache} is a {type(cache).__name__}, "
                                    f"not a dict: {self._stale_advice()}")
            if isinstance(cache, RecordingDict):
                raise MlacheckError(f"{spec.family}: {spec.module}.{spec.cache} is already being recorded; install mlacheck once per process")
            self._adapter = DICT_ADAPTERS[spec.lookup](cache, self)
            existing, count = list(cache), len(cache)
            self._replace(owner, attribute, self._adapter)
            installed_keys = frozenset(existing)
            self._undo.append(lambda: self._give_back(cache, installed_keys))
        if spec.compile:
            compile_owner, compile_name = self._compile_target(module)
            self._timer = compile_timer.acquire(compile_owner, compile_name, self.policy.compile == "skip")
            self._undo.append(lambda: compile_timer.release(self._timer))
        dry = DryStandIns(spec.dry_patches, spec.dry_host_arguments, self.policy) if self.policy.dry else None
        for name, function in dispatch.items():
            self._wrap_everywhere(module, function, wrap_dispatch(function, name, self, dry))
        self._family_event = {"type": "family", "family": spec.family, "distribution": spec.distribution,
                              "version": self._version(), "providers": self._providers(), "key_fields": list(spec.key_fields),
                              "cache_kind": spec.cache_kind, "fingerprint": fingerprint}
        self.sink.write({**self._family_event, "preexisting": count})
        for key in existing:
            self._write_compile(self._vid(key), "preexisting", None, "compile", None, [])
        self.installed = True

    def remove(self) -> None:
        """Undo `install` (the module gets its own cache back, holding every variant really compiled)."""
        if not self.installed:
            return
        self.safely("flush", lambda: self.flush(final=True))
        if isinstance(self._adapter, FunctoolsAdapter):
            self._check_bypass_functools()
        self._undo_all()
        self.installed = False

    def _undo_all(self) -> None:
        for undo in reversed(self._undo):
            self.safely("remove", undo)
        self._undo.clear()

    def after_fork(self) -> None:
        """In a forked child: a fresh trace starts; what the child inherited is listed, counts start at zero."""
        self.forget_fast()
        self._counters.clear()
        self._call_base = {name: count_of(counter) for name, counter in self._calls.items()}
        self._first.clear()
        self._errors.clear()
        self._written = None
        self.sink.write({**self._family_event, "preexisting": 0})
        for key in self._cached_keys():
            self._write_compile(self.vids[key], "inherited", None, "compile", None, [])

    # -- hooks (called by the adapters and the dispatch wrappers) ---------------------------------------
    def inserted(self, key: object, value: object, frame: FrameType, seconds: float | None = None,
                 origin: str | None = None) -> None:
        """A variant entered the cache."""
        try:
            if origin is None:
                timed = self._timer.seconds(value) if self._timer is not None else None
                origin = "skip" if isinstance(value, SkippedCompile) else "compile" if timed is not None else "unknown"
                seconds = timed
            where = self._reader.read(frame)
            phase = "serving" if where.dispatch_depth is not None and where.phase is None else where.phase or "warmup"
            self._stand_ins.pop(self._vid(key), None)
            self._write_compile(self._vid(key), phase, seconds, origin, where.site, where.stack)
            self.maybe_flush()
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            self._internal_error("insert", exc)

    def looked_up(self, key: object, value: object, frame: FrameType, where: Where | None = None,
                  count: bool = True) -> object:
        """A lookup the fast path did not serve: is it a dispatch? Count it; a serving one is fast from now on.

        `value` is what the lookup found (MISSING for a `contains` that missed: the insert follows); `where`, if
        the caller read it already; `count=False` where the launch that follows counts the dispatch.
        """
        try:
            where = where or self._reader.read(frame)
            if where.dispatch_depth is None:
                return value
            vid = self._vid(key)
            counter = self._count_dispatch(vid, where, count)
            self.maybe_flush()
            if value is MISSING:
                return value
            returned = self._returned(vid, value)
            if where.phase is None:
                self.fast[key] = (counter, returned)
            return returned
        except Exception as exc:  # noqa: BLE001
            self._internal_error("lookup", exc)
            return value

    def where(self, frame: FrameType) -> Where | None:
        """Where a lookup happened (None where reading the stack failed: an internal error)."""
        try:
            return self._reader.read(frame)
        except Exception as exc:  # noqa: BLE001
            self._internal_error("lookup", exc)
            return None

    def launched(self, key: object, value: object, frame: FrameType) -> object:
        """What `cache[key]` gives a `contains` family's dispatch under a launch policy: the stand-in."""
        try:
            return value if self._reader.read(frame).dispatch_depth is None else self._returned(self._vid(key), value)
        except Exception as exc:  # noqa: BLE001
            self._internal_error("lookup", exc)
            return value

    def dispatch_raised(self, name: str, error: BaseException, start: int, frame: FrameType) -> None:
        """A dispatch call raised: before its lookup (nothing was checked) or after it."""
        try:
            reached = next(self.ticks) > start + 1
            next(self.call_counter(f"{name}!{'after' if reached else 'before'}"))
            identity = (name, type(error).__name__, reached)
            if identity not in self._errors:
                self._errors.add(identity)
                message = str(error).strip().splitlines()
                self._write({"type": "dispatch_error", "family": self.spec.family, "function": name,
                                 "error": type(error).__name__, "message": message[0][:300] if message else "",
                                 "reached_lookup": reached, "site": self._reader.read(frame).site})
        except Exception as exc:  # noqa: BLE001
            self._internal_error("dispatch", exc)

    def dispatch_without_lookup(self, name: str, frame: FrameType) -> None:
        """A dispatch call returned without looking the cache up: it ran a variant nothing checked."""
        try:
            next(self.call_counter(f"{name}!nolookup"))
            if (name, "no lookup") not in self._errors:
                self._errors.add((name, "no lookup"))
                self._write({"type": "no_lookup", "family": self.spec.family, "function": name,
                             "site": self._reader.read(frame).site})
        except Exception as exc:  # noqa: BLE001
            self._internal_error("dispatch", exc)

    def call_counter(self, name: str) -> Iterator[int]:
        counter = self._calls.get(name)
        if counter is None:
            counter = self._calls[name] = hotpath.counter()
        return counter

    def serving_started(self) -> None:
        """Serving starts now: what this process counted as serving so far was warm-up."""
        self.flush()
        for (vid, phase), counter in list(self._counters.items()):
            if phase == "serving":
                warmup = self._counters.get((vid, "warmup"))
                self._counters[(vid, "warmup")] = hotpath.counter(count_of(counter) + (count_of(warmup) if warmup else 0))
                del self._counters[(vid, phase)]
        self.forget_fast()
        self._first = {first for first in self._first if first[1] != "serving"}
        self.flush()

    def phase_changed(self) -> None:
        """A warm-up or capture frame starts or ends: the next lookup of every variant reads the stack again."""
        self.forget_fast()

    def cleared(self) -> None:
        """The cache was emptied (functools cache_clear): its variants compile again when next used."""
        self._stand_ins.clear()

    def maybe_flush(self) -> None:
        """Flush when the policy's interval has passed since the last flush."""
        if time.monotonic() - self._flushed_at >= self.policy.flush_seconds:
            self.safely("flush", self.flush)

    def flush(self, final: bool = False) -> None:
        """Write the cumulative counts (when they changed, or finally)."""
        self._flushed_at = time.monotonic()
        dispatches = {f"{vid}:{phase}": count_of(counter) for (vid, phase), counter in self._counters.items()}
        calls = {name: count_of(counter) - self._call_base.get(name, 0) for name, counter in self._calls.items()}
        written = {"dispatches": dispatches, "calls": calls}
        if written != self._written or final:
            self._written = written
            self._write({"type": "counts", "family": self.spec.family, **written, "final": final})

    # -- helpers ----------------------------------------------------------------------------------------
    def forget_fast(self) -> None:
        """Empty the fast table (and a functools family's front caches): every next lookup reads the stack."""
        self.fast.clear()
        if isinstance(self._adapter, FunctoolsAdapter):
            self._adapter.forget()

    def _count_dispatch(self, vid: int, where: Where, count: bool = True) -> Iterator[int]:
        phase = where.phase or "serving"
        counter = self._counters.get((vid, phase))
        if counter is None:
            counter = self._counters[(vid, phase)] = hotpath.counter()
        if count:
            next(counter)
            next(self.ticks)
        if (vid, phase) not in self._first:
            self._first.add((vid, phase))
            key, spelling = self._described[vid]
            self._write({"type": "dispatch", "family": self.spec.family, "vid": vid, "key": key,
                             "spelling": spelling, "phase": phase, "site": where.site, "stack": where.stack,
                             "call": self._call_facts(where.dispatch_frame)})
        return counter

    def _call_facts(self, frame: FrameType | None) -> dict:
        """The rule's `call_facts`: locals of the dispatch call that looked this variant up first (batch size, ...)."""
        if frame is None or not self.spec.call_facts:
            return {}
        local = frame.f_locals
        return {name: typed(local[name]) for name in self.spec.call_facts if name in local}

    def _returned(self, vid: int, value: object) -> object:
        if self.launch is None:
            return value
        stand_in = self._stand_ins.get(vid)
        if stand_in is None:
            stand_in = self._stand_ins[vid] = self.launch(self._described[vid][0], value)
        return stand_in

    def _vid(self, key: object) -> int:
        vid = self.vids.get(key)
        if vid is None:
            vid = self.vids[key] = len(self._described)
            self._described.append(self._describe(key))
        return vid

    def _describe(self, key: object) -> tuple[dict, dict | None]:
        if isinstance(self._adapter, FunctoolsAdapter):
            fields, spelling = self._adapter.describe(key)
            return {name: typed(value) for name, value in fields.items()}, spelling
        values = key if isinstance(key, tuple) else (key,)
        names = self.spec.key_fields
        return {(names[i] if i < len(names) else f"field{i}"): typed(v) for i, v in enumerate(values)}, None

    def _write_compile(self, vid: int, phase: str, seconds: float | None, origin: str, site: str | None,
                       stack: list[str]) -> None:
        key, spelling = self._described[vid]
        self._write({"type": "compile", "family": self.spec.family, "vid": vid, "key": key, "spelling": spelling,
                         "phase": phase, "seconds": seconds, "origin": origin, "site": site or "before mlacheck",
                         "stack": stack})

    def _cached_keys(self) -> list:
        if isinstance(self._adapter, FunctoolsAdapter):
            return [key for key in self.vids if key not in self._adapter.skipped]
        return [key for key in self._adapter if key in self.vids]

    def _replace(self, owner: object, attribute: str, replacement: object) -> None:
        original = getattr(owner, attribute)
        setattr(owner, attribute, replacement)
        self._undo.append(lambda: setattr(owner, attribute, original))

    def _wrap_everywhere(self, module, function: Callable, wrapper: Callable) -> None:
        """Replace the dispatch function in its module and wherever the family's package re-exports it."""
        package = self.spec.module.partition(".")[0]
        for name, other in list(sys.modules.items()):
            if other is None or not (name == package or name.startswith(package + ".")):
                continue
            for attribute, value in list(vars(other).items()):
                if value is function:
                    self._replace(other, attribute, wrapper)

    def _give_back(self, original: dict, installed_keys: frozenset) -> None:
        """The module's own dict back, holding what the run's cache holds (less skipped compiles), and what was
        written past mlacheck through an older reference to it (reported)."""
        recording = self._adapter
        bypassed = {key: value for key, value in original.items()
                    if key not in installed_keys and not dict.__contains__(recording, key)}
        if bypassed:
            self._internal_error("remove", f"{len(bypassed)} variant(s) entered {self.spec.module}.{self.spec.cache} through "
                                           "a reference taken before mlacheck was installed; they are missing from this report")
        original.clear()
        original.update({key: value for key, value in dict.items(recording) if not isinstance(value, SkippedCompile)})
        original.update(bypassed)

    def _check_bypass_functools(self) -> None:
        known = len(self._cached_keys()) + self._adapter.unlisted
        size = self._adapter.original.cache_info().currsize
        if size > known:
            self._internal_error("remove", f"{size - known} variant(s) entered {self.spec.module}.{self.spec.cache} through "
                                           "a reference to the cached function taken before mlacheck was installed")

    def _compile_target(self, module) -> tuple[object, str]:
        where, _, name = self.spec.compile.rpartition(":")
        owner = self._import(where) if where else module
        path, _, attribute = name.rpartition(".")
        owner = self._resolve(owner, path) if path else owner
        self._attribute(owner, attribute)
        return owner, attribute

    def fingerprint(self, module) -> str | None:
        """sha256 over the signature and source of the functions the key depends on (None where unreadable)."""
        if not self.spec.key_functions:
            return None
        digest = hashlib.sha256()
        try:
            for name in self.spec.key_functions:
                function = inspect.unwrap(self._resolve(module, name))
                digest.update(f"{name}{inspect.signature(function)}\n{inspect.getsource(function)}".encode())
        except (OSError, TypeError, ValueError, MlacheckError):
            return None
        return digest.hexdigest()[:16]

    def _resolve(self, root: object, path: str) -> object:
        for part in path.split("."):
            root = self._attribute(root, part)
        return root

    def _write(self, event: dict) -> None:
        """Write one event; a sink that fails loses the event, never what the hook goes on to do for the program."""
        try:
            self.sink.write(event)
        except Exception as exc:  # noqa: BLE001
            self._internal_error("write", exc)

    def safely(self, where: str, action: Callable[[], object]) -> None:
        """Run a capture action; a failure becomes an internal error, never an exception in the program."""
        try:
            action()
        except Exception as exc:  # noqa: BLE001
            self._internal_error(where, exc)

    def _internal_error(self, where: str, error: object) -> None:
        try:
            self.sink.write({"type": "internal_error", "where": f"{self.spec.family}: {where}",
                             "message": f"{type(error).__name__}: {error}" if isinstance(error, Exception) else str(error)})
        except Exception:  # noqa: BLE001 - the sink itself failed; nothing left to tell
            pass

    def _import(self, name: str):
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            raise MlacheckError(f"{self.spec.family}: cannot import {name} ({exc}); install {self.spec.distribution}") from None

    def _attribute(self, owner: object, name: str) -> object:
        try:
            return getattr(owner, name)
        except AttributeError:
            raise MlacheckError(f"{self.spec.family}: {self.spec.module} has no {name!r} where the rule looks: "
                                f"{self._stale_advice()}") from None

    def _version(self) -> str | None:
        from importlib import metadata  # slow to import; only a family's install needs it

        try:
            return metadata.version(self.spec.distribution)
        except metadata.PackageNotFoundError:
            return None

    def _providers(self) -> list[str]:
        """"name version" of each installed distribution that provides the family's top-level package (a fork of
        the library can install the same import name with another key layout)."""
        from importlib import metadata

        names = _packages_distributions().get(self.spec.module.partition(".")[0], [])
        return [f"{name} {metadata.version(name)}" for name in dict.fromkeys(names)]

    def _stale_advice(self) -> str:
        return f"installed {self.spec.distribution} is {self._version()}; re-check the rule file against it"
