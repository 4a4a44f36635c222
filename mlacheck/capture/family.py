"""FamilyCapture: one family's capture in one process; turns what its cache adapter and dispatch wrappers see into
its ledger's entries.

A lookup outside any dispatch call is not a dispatch. Hooks never raise into the program: a failure becomes an
`internal_error` event. The variants, counts and events are the family's `ledger`; where the cache sits (`caches`),
what is replaced and undone (`install`), the phase of a compile or dispatch (`phase`, through the ledger) and the
code's fingerprint (`fingerprint`) are each their own module's.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

from mlacheck import events
from mlacheck.capture import caches, compile_timer, hotpath
from mlacheck.capture.compile_timer import SkippedCompile
from mlacheck.capture.dispatch import wrap_dispatch
from mlacheck.capture.fingerprint import fingerprint, installed_version, providers, unreadable_key_function
from mlacheck.capture.hooks import MISSING, LaunchPolicy
from mlacheck.capture.install import AlreadyRecorded, Patches, import_advice, unwrapped
from mlacheck.capture.ledger import NO_KEY, Ledger
from mlacheck.capture.policy import CapturePolicy
from mlacheck.capture.stack import StackReader, Where
from mlacheck.keys import typed
from mlacheck.rulefiles.plain import PhaseRule, RuleFile
from mlacheck.sinks import EventSink


def no_launch(*args: object, **kwargs: object) -> None:
    """The launch stand-in of `--dry`: nothing runs."""


class FamilyCapture:
    """Capture of one kernel family in one process (it keeps `hooks.CaptureHooks` for its adapter and wrappers)."""

    def __init__(
        self,
        rule: RuleFile,
        sink: EventSink,
        policy: CapturePolicy = CapturePolicy(),
        launch: LaunchPolicy | None = None,
        phases: tuple[PhaseRule, ...] = (),
    ) -> None:
        self.rule, self.family, self.sink, self.policy, self.phases = rule, rule.family, sink, policy, phases
        self.launch = (
            launch if launch is not None else (lambda key, kernel: no_launch) if policy.replace_launch else None
        )
        self.fast = hotpath.FastTable()  # variants seen in serving: key -> (counter, value to return)
        self.ticks = hotpath.ticks()  # per thread: a call is judged by its own thread's lookups
        self.ledger = Ledger(
            self.family.name, sink, lambda key: self._adapter.describe(key), policy.flush_seconds, audit=self._audit
        )
        self._errors: set[tuple] = set()
        self._stand_ins: dict[int, object] = {}
        self._patches = Patches(self.family.name, self._stale_advice, self.family.module)
        self._adapter: caches.CacheAdapter | None = None
        self._superseded: list[caches.CacheAdapter] = []  # adapters of the module before it ran again (follow)
        self._timer: compile_timer.CompileTimer | None = None
        self._reader: StackReader | None = None
        self._missed: dict[int, tuple[object, int]] = {}  # thread -> (key, id of the dispatch frame) of its last miss
        self.installed = False

    # -- install / remove -------------------------------------------------------------------------------
    def install(self) -> None:
        """Put the adapter, the compile timer and the dispatch wrappers in place; write the `family` event.

        An install that fails (a stale rule, a failing sink) takes out what it had put in place, then raises."""
        try:
            self._install()
        except BaseException:
            self._patches.undo(self.safely)
            raise

    def _install(self) -> None:
        family, patches = self.family, self._patches
        module = patches.import_module(family.module, lambda: import_advice(family.distribution))
        adapter = self._adapter = caches.adapter(family, module, self, patches)
        dispatch = {name: patches.function(name, module) for name in family.dispatch}  # name -> (owner, attribute)
        functions = {name: getattr(owner, attribute) for name, (owner, attribute) in dispatch.items()}
        self._reader = StackReader(
            frozenset(id(unwrapped(f).__code__) for f in functions.values()),
            self.phases,
            (family.package, *family.site_skip),
        )
        code = fingerprint(module, family.key_functions)  # reads and tokenizes each key function's source: once
        unreadable = unreadable_key_function(module, family.key_functions) if code is None else None
        adapter.install()
        existing, count = adapter.preexisting()
        if family.compile:
            callers = frozenset((family.module, name) for name in family.compile_callers) or None
            self._timer = compile_timer.acquire(
                *patches.function(family.compile, module), self.policy.compile == "skip", callers, self
            )
            patches.on_undo(lambda: compile_timer.release(self._timer, self))
        dry = self._dry_stand_ins()
        for name, (owner, attribute) in dispatch.items():
            self._patches.wrap_function(
                owner, attribute, wrap_dispatch(functions[name], name, self, family.every_call_looks_up, dry)
            )
        self.ledger.announce(
            count,
            distribution=family.distribution,
            version=installed_version(family.distribution),
            providers=providers(family.package),
            key_fields=list(family.key_fields),
            cache_kind=family.cache_kind,
            fingerprint=code,
        )
        if unreadable is not None:  # a fingerprint that cannot be computed is not "unchanged"
            self.ledger.unseen(unreadable)
        for key in existing:
            self.ledger.compiled(self.ledger.vid(key), "preexisting", None, "compile", None, [])
        self.installed = True

    def _dry_stand_ins(self) -> object | None:
        """Under --dry, the stand-ins of the family's launches (the dry module is loaded only then)."""
        if not self.policy.dry:
            return None
        from mlacheck.capture.dry import DryStandIns

        return DryStandIns(self.rule.dry.patch, self.rule.dry.host_arguments, self.policy)

    def remove(self) -> None:
        """Undo `install` (the program gets its own cache back, holding every variant really compiled)."""
        if not self.installed:
            return
        self.safely("flush", lambda: self.ledger.flush(final=True))
        self._patches.undo(self.safely)
        self.installed = False

    def follow(self) -> None:
        """The family's module ran again (reloaded, or imported again as a new module object): watch the cache and
        the dispatch functions it holds now too, beside those watched before (variant numbers go on); what is still
        mlacheck's is left as it is. A failure is an internal error (the audit says what went unwatched)."""
        if self.installed:
            self.safely("follow", self._follow)

    def _follow(self) -> None:
        family, patches = self.family, self._patches
        module = patches.import_module(family.module)
        adapter = caches.adapter(family, module, self, patches)
        try:
            adapter.install()
        except AlreadyRecorded:  # the module kept the cache it had (it was not rebound)
            adapter = None
        if adapter is not None:
            self._adapter.superseded()
            self._superseded.append(self._adapter)
            self._adapter = adapter
            existing, count = adapter.preexisting()
            self.ledger.announce_again(count)
            for key in existing:
                self.ledger.compiled(self.ledger.vid(key), "preexisting", None, "compile", None, [])
        dry = self._dry_stand_ins()
        for name in family.dispatch:
            owner, attribute = patches.function(name, module)
            if not patches.holds(owner, attribute):
                function = getattr(owner, attribute)
                self._reader.dispatch_code_ids |= {id(unwrapped(function).__code__)}
                patches.wrap_function(
                    owner, attribute, wrap_dispatch(function, name, self, family.every_call_looks_up, dry)
                )
        self.forget_fast()

    def after_fork(self) -> None:
        """In a forked child: a fresh trace starts; what the child inherited is listed, counts start at zero."""
        self.forget_fast()
        self._errors.clear()
        vids = self.ledger.vids
        self.ledger.after_fork(vids[key] for key in self._adapter.cached(vids))

    # -- hooks (called by the adapter and the dispatch wrappers: hooks.CaptureHooks) ---------------------
    def inserted(
        self,
        key: object,
        value: object,
        frame: FrameType,
        seconds: float | None = None,
        origin: str | None = None,
        phase: str | None = None,
        start: int | None = None,
        **cache: list[str],
    ) -> None:
        """A variant entered the cache (in `phase`, where the adapter knows it; else the stack's; `start`: the id of
        the compile that made it, where the adapter timed it; `cache`: a disk cache's entries and foreign entries)."""
        try:
            if origin is None:
                timed = self._timer.timed(value) if self._timer is not None else None
                origin = "skip" if isinstance(value, SkippedCompile) else "compile" if timed is not None else "unknown"
                seconds, start = timed or (None, None)
            where = self._reader.read(frame)
            self._missed.pop(threading.get_ident(), None)
            vid = self.ledger.vid(key)
            self._stand_ins.pop(vid, None)
            phase = phase or self.phase_at(where)
            self.ledger.compiled(vid, phase, seconds, origin, where.site, where.stack, start, **cache)
            self.ledger.maybe_flush()
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            self.internal_error("insert", exc)

    def looked_up(
        self, key: object, value: object, frame: FrameType, where: Where | None = None, count: bool = True
    ) -> object:
        """A lookup the fast path did not serve: is it a dispatch? Count it; a serving one is fast from now on.

        `value` is what the lookup found (MISSING for a `contains` that missed: the insert follows); `where`, if
        the caller read it already; `count=False` where the launch that follows counts the dispatch.
        """
        try:
            where = where or self._reader.read(frame)
            if where.dispatch_depth is None:
                return value
            vid = self.ledger.vid(key)
            counter = self.ledger.dispatched(
                vid,
                self.ledger.phase(where.phase, True),
                where.site,
                where.stack,
                self._call_facts(where.dispatch_frame),
                count,
            )
            if count:
                next(self.ticks)
            self.ledger.maybe_flush()
            if value is MISSING:  # the compile that follows is of this key
                self._missed[threading.get_ident()] = (key, id(where.dispatch_frame))
                return value
            returned = self._returned(vid, value)
            if where.phase is None:
                self.fast[key] = (counter, returned)
            return returned
        except Exception as exc:  # noqa: BLE001
            self.internal_error("lookup", exc)
            return value

    def where(self, frame: FrameType) -> Where | None:
        """Where a lookup happened (None where reading the stack failed: an internal error)."""
        try:
            return self._reader.read(frame)
        except Exception as exc:  # noqa: BLE001
            self.internal_error("lookup", exc)
            return None

    def phase_at(self, where: Where) -> str:
        """The phase of a compile at `where`, now (`capture.phase.decide`, with whether this process marked serving)."""
        return self.ledger.phase(where.phase, where.dispatch_depth is not None)

    def launched(self, key: object, value: object, frame: FrameType) -> object:
        """What `cache[key]` gives a `contains` family's dispatch under a launch policy: the stand-in."""
        try:
            if self._reader.read(frame).dispatch_depth is None:
                return value
            return self._returned(self.ledger.vid(key), value)
        except Exception as exc:  # noqa: BLE001
            self.internal_error("lookup", exc)
            return value

    @contextlib.contextmanager
    def compiling(self, frame: FrameType, key: object = NO_KEY, fresh: bool = True) -> Iterator[int | None]:
        """Around a compile called from `frame` (a `fresh` key's: one the cache may not hold yet): `compile_start` before
        it (with the key where it is known: given, or what a `contains` lookup of the same dispatch call missed),
        `compile_end` after it, so that a process that dies in it leaves the compile behind. Gives the compile_start's
        id (None: none written), for the record of what the compile made."""
        start = self.compile_began(frame, key) if fresh else None
        started = time.perf_counter()
        try:
            yield start
        except BaseException:
            self.compile_ended(start, time.perf_counter() - started, "raised")
            raise
        self.compile_ended(start, time.perf_counter() - started, "returned")

    def compile_began(self, frame: FrameType, key: object = NO_KEY) -> int | None:
        """A compile called from `frame` begins: its `compile_start` (its id for `compile_ended`; None where it was
        lost, an internal error)."""
        try:
            where = self._reader.read(frame)
            missed = self._missed.pop(threading.get_ident(), None)
            if key is NO_KEY and missed is not None and where.dispatch_frame is not None:
                key = missed[0] if missed[1] == id(where.dispatch_frame) else NO_KEY
            return self.ledger.compile_began(self.phase_at(where), where.site, where.stack, key)
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            self.internal_error("compile", exc)
            return None

    def compile_ended(self, start: int | None, seconds: float, outcome: str) -> None:
        """The compile `compile_began` began ended: returned, raised, or (a library's disk cache) cached: it made
        nothing."""
        self.safely("compile", lambda: self.ledger.compile_ended(start, seconds, outcome))

    def unwatched_began(self, frame: FrameType, kernel: str) -> tuple | None:
        """A call that may build a kernel no variant stands for begins: its `compile_start` as this family's net's,
        its phase as a compile net's (a capture path that cannot tell whether a dispatch made it)."""
        try:
            where = self._reader.read(frame)
            phase = self.ledger.phase(where.phase, None)
            event = events.compile_start_event(phase, where.site, where.stack, net=self.family.name, kernel=kernel)
            self.ledger.sink.write(event)
            return event["id"], phase, where, kernel
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            self.internal_error("compile", exc)
            return None

    def unwatched_ended(
        self,
        start: tuple | None,
        seconds: float,
        outcome: str,
        fields: Callable[[], dict],
        entries: list[str] | None = None,
    ) -> None:
        """That call ended: its `compile_end`, and where it built a kernel, its `unwatched_compile`, built for
        `fields()` (read only then; where they cannot be read, an internal error and the compile without them), with
        the disk cache `entries` it made where there is one."""
        if start is None:
            return
        started, phase, where, kernel = start
        self.ledger.write(events.compile_end_event(started, seconds, outcome))
        if outcome == "returned":
            try:
                built_for = fields()
            except Exception as exc:  # noqa: BLE001 - capture never raises into the program
                self.internal_error("compile", exc)
                built_for = {}
            self.ledger.write(
                events.unwatched_compile_event(
                    self.family.name, kernel, built_for, seconds, phase, where.site, where.stack, entries
                )
            )

    def call_counter(self, name: str) -> object:
        return self.ledger.counts.calls(name)

    def dispatch_raised(self, name: str, error: BaseException, start: int, frame: FrameType) -> None:
        """A dispatch call raised: before its lookup (nothing was checked) or after it."""
        try:
            reached = next(self.ticks) > start + 1
            next(self.ledger.counts.calls(f"{name}!{'after' if reached else 'before'}"))
            identity = (name, type(error).__name__, reached)
            if identity not in self._errors:
                self._errors.add(identity)
                message = str(error).strip().splitlines()
                self.ledger.write(
                    events.dispatch_error_event(
                        self.family.name,
                        name,
                        type(error).__name__,
                        message[0][:300] if message else "",
                        reached,
                        self._reader.read(frame).site,
                    )
                )
        except Exception as exc:  # noqa: BLE001
            self.internal_error("dispatch", exc)

    def dispatch_without_lookup(self, name: str, frame: FrameType) -> None:
        """A dispatch call returned without looking the cache up: it ran a variant nothing checked."""
        try:
            next(self.ledger.counts.calls(f"{name}!nolookup"))
            if (name, "no lookup") not in self._errors:
                self._errors.add((name, "no lookup"))
                self.ledger.write(events.no_lookup_event(self.family.name, name, self._reader.read(frame).site))
        except Exception as exc:  # noqa: BLE001
            self.internal_error("dispatch", exc)

    def serving_started(self) -> None:
        """Serving starts now: what this process counted as serving so far was warm-up, and every compile from now on
        is serving."""
        self.ledger.serving_started()
        self.forget_fast()

    def phase_changed(self) -> None:
        """A warm-up or capture frame starts or ends: the next lookup of every variant reads the stack again."""
        self.forget_fast()

    def forget_fast(self) -> None:
        """Empty the fast table (and the adapter's own fronts): every next lookup reads the stack."""
        self.fast.clear()
        if self._adapter is not None:
            self._adapter.forget()

    def cleared(self) -> None:
        """The cache was emptied (functools cache_clear): its variants compile again when next used."""
        self._stand_ins.clear()

    def maybe_flush(self) -> None:
        self.ledger.maybe_flush()

    def flush(self, final: bool = False) -> None:
        self.ledger.flush(final)

    def _audit(self, final: bool) -> list[str]:
        """What went past capture since the last flush (the ledger writes each as an `unseen` event at each flush): an
        attribute no longer holding what capture put there, a module imported again, and each adapter's audit (the
        current one's and those of the module before it ran again)."""
        if not (self.installed or final):
            return []
        adapters = self._superseded + ([self._adapter] if self._adapter is not None else [])
        return self._patches.moved() + [line for adapter in adapters for line in adapter.audit()]

    def safely(self, where: str, action: Callable[[], object]) -> None:
        self.ledger.safely(where, action)

    def internal_error(self, where: str, error: object) -> None:
        self.ledger.internal_error(where, error)

    # -- what a dispatch gets ---------------------------------------------------------------------------
    def _call_facts(self, frame: FrameType | None) -> dict:
        """The rule's `call_facts`: locals of the dispatch call that looked this variant up first (batch size, ...)."""
        if frame is None or not self.family.call_facts:
            return {}
        local = frame.f_locals
        return {name: typed(local[name]) for name in self.family.call_facts if name in local}

    def _returned(self, vid: int, value: object) -> object:
        if self.launch is None:
            return value
        stand_in = self._stand_ins.get(vid)
        if stand_in is None:
            stand_in = self._stand_ins[vid] = self.launch(self.ledger.described[vid][0], value)
        return stand_in

    def _stale_advice(self) -> str:
        return (
            f"installed {self.family.distribution} is {installed_version(self.family.distribution)}; re-check the "
            "rule file against it"
        )
