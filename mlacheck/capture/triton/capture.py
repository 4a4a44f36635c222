"""TritonCapture: every Triton kernel of one process as a kernel family, installed when `triton` is imported.

Compiles are seen through Triton's own hooks (`triton.knobs`, 3.6 to 3.9), chained onto whatever each slot held,
never displacing it: `runtime.jit_cache_hook` before a compile (the phase and site are read from the launching
thread's stack there, and its `compile_start` is written), `runtime.jit_post_compile_hook` after it (its time; a compile the launch goes on to run
is also that launch's dispatch), and `compilation.listener`, a watchdog: a JIT compile that reached the compiler
without passing mlacheck's hook means someone replaced the slot without chaining (the hooks go back on top, and
the run cannot pass). Hits are counted by the dicts of `families.py`, put in place for kernels made from now on
(`JITFunction.create_binder`, `Autotuner.__init__`) and for those already made (one walk of the objects at
install). A tuning's time is the sum of its benchmark runs (`Autotuner._bench`).

Uninstall gives back each slot that still holds mlacheck's hook; a slot someone chained on top of keeps it, as a
pass-through. Nothing here raises into the program: a failure is an `internal_error` event.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mlacheck import events
from mlacheck.capture import ledger
from mlacheck.capture.install import Patches
from mlacheck.capture.policy import CapturePolicy
from mlacheck.capture.stack import StackReader, Where
from mlacheck.capture.triton import dry
from mlacheck.capture.triton.families import CountingCache, KernelFamily, TuningCache, counting
from mlacheck.capture.triton.keys import OPTIONS, describe, tuning_fields
from mlacheck.events import EventSink
from mlacheck.rulefiles import plain
from mlacheck.rulefiles.plain import PhaseRule, Triton

HOOKS = (("runtime", "jit_cache_hook"), ("runtime", "jit_post_compile_hook"), ("compilation", "listener"))


@dataclass
class _Pending:
    """A compile between mlacheck's two hooks."""

    family: KernelFamily
    key: str
    phase: str
    where: Where
    launched: bool  # the launch goes on to run it (not JITFunction.warmup)
    started: float
    thread: int
    start: int | None  # its compile_start
    listener_seconds: float | None = None


class TritonCapture:
    """The Triton kernels of one process (the agent calls install, serving_started, phase_changed, flush, after_fork
    and remove, as for a rule file's family)."""

    def __init__(
        self,
        rule: dict | Triton,
        sink: EventSink,
        policy: CapturePolicy = CapturePolicy(),
        phases: tuple[PhaseRule, ...] = (),
    ) -> None:
        self.rule = plain.triton(rule) if isinstance(rule, dict) else rule
        self.sink, self.policy = sink, policy
        self.families: dict[str, KernelFamily] = {}
        self.installed = False
        self.active = False
        self._owners: dict[int, tuple[object, KernelFamily | None]] = {}  # id(JITFunction or Autotuner) -> family
        self._counted: dict[int, object] = {}  # id -> each JITFunction or Autotuner given a counting dict
        self._pending: dict[tuple[int, str], _Pending] = {}  # (id(kernel_cache), key) -> the compile in flight
        self._bench_seconds: dict[int, float] = {}  # id(Autotuner) -> its benchmark time since its last tuning
        self._prev: dict[str, object] = {}
        self._ours = {
            "jit_cache_hook": self._cache_hook,
            "jit_post_compile_hook": self._post_compile_hook,
            "listener": self._compilation_listener,
        }
        self._jit_names: dict[str, str] = {}  # a JITFunction constexpr's cache_key -> its name
        self._reader = StackReader(frozenset(), phases, ("triton", *self.rule.site_skip))
        self._patches = Patches("triton")
        self._flushed_at = time.monotonic()
        self._target_written = False
        self._serving = False  # the process marked serving start
        self._triton: dict[str, object] = {}

    # -- install / remove -------------------------------------------------------------------------------
    def install(self) -> None:
        """Chain the hooks, put the counting dicts in place, and under --dry the dry driver. An install that fails
        takes out what it had put in place, then raises."""
        try:
            self._install()
        except BaseException:
            self._patches.undo(self.safely)
            raise

    def _install(self) -> None:
        import triton
        from triton import knobs
        from triton.runtime import _async_compile, autotuner, jit
        from triton.runtime.driver import driver

        self._triton = {"version": triton.__version__, "async": _async_compile, "JITFunction": jit.JITFunction}
        self.active = True
        self._patches.on_undo(self._deactivate)
        for group, slot in HOOKS:
            self._chain(getattr(knobs, group), slot)
        if not any(
            getattr(jit.serialize_specialization_data, mark, False) for mark in ("_vllm_guarded", "_json_guarded")
        ):
            self._patches.replace(jit, "serialize_specialization_data", _guarded(jit.serialize_specialization_data))
        JITFunction, Autotuner = jit.JITFunction, autotuner.Autotuner
        create_binder, tuner_init, bench = JITFunction.create_binder, Autotuner.__init__, Autotuner._bench
        self._patches.replace(JITFunction, "create_binder", lambda jf: self._counting_entry(jf, create_binder(jf)))

        def init(tuner: object, *args: object, **kwargs: object) -> None:
            tuner_init(tuner, *args, **kwargs)
            self._adopt_tuner(tuner)

        self._patches.replace(Autotuner, "__init__", init)
        if self.policy.dry:
            backend, capability = dry.target_of(self.policy.target_arch)
            from triton.backends.compiler import GPUTarget

            saved = driver._active  # not `.active`: reading it would make the real driver, which needs a GPU
            driver.set_active(dry.DryDriver(GPUTarget(backend, capability, 32), self.policy.target_arch))
            self._patches.on_undo(lambda: setattr(driver, "_active", saved))
            self._patches.replace(JITFunction, "run", dry.dry_run(JITFunction.run))
            self._patches.replace(Autotuner, "_bench", dry.dry_bench)
            self._write_target(self.policy.target_arch)
        else:
            self._patches.replace(Autotuner, "_bench", self._timed_bench(bench))
        for thing in gc.get_objects():  # kernels made before install (issubclass: isinstance reads __class__)
            kind = type(thing)
            if issubclass(kind, JITFunction):
                self.safely("install", lambda jf=thing: self._adopt_kernel(jf, create_binder))
            elif issubclass(kind, Autotuner):
                self.safely("install", lambda tuner=thing: self._adopt_tuner(tuner))
        self._patches.on_undo(self._give_back_caches)
        self.installed = True

    def _give_back_caches(self) -> None:
        """Each counting dict back to a plain dict of the same entries (not while an async compile may write one)."""
        if self._triton["async"].active_mode.get() is not None:
            return
        for owner in self._counted.values():
            if type(getattr(owner, "cache", None)) is TuningCache:
                owner.cache = dict(owner.cache)
            for device, entry in list(getattr(owner, "device_caches", {}).items()):
                if type(entry[0]) is CountingCache:
                    owner.device_caches[device] = (dict(entry[0]), *entry[1:])
        self._counted.clear()

    def _chain(self, owner: object, slot: str) -> None:
        """Our hook in the slot, calling what the slot held; given back at remove only where the slot still holds it."""
        self._prev[slot] = getattr(owner, slot)
        ours = self._ours[slot]
        setattr(owner, slot, ours)

        def undo() -> None:
            if getattr(owner, slot) is ours:
                setattr(owner, slot, self._prev[slot])

        self._patches.on_undo(undo)

    def _deactivate(self) -> None:
        self.active = False  # a hook still in someone's chain now only passes through

    def remove(self) -> None:
        """Flush the final counts, then undo install (the program keeps every kernel compiled)."""
        if not self.installed:
            return
        self.safely("flush", lambda: self.flush(final=True))
        self._patches.undo(self.safely)
        self.installed = False

    def after_fork(self) -> None:
        """In a forked child: each family writes a fresh start (what the child inherited, counts from zero)."""
        self._pending.clear()
        for family in list(self.families.values()):
            self.safely("fork", family.after_fork)

    # -- the agent's calls --------------------------------------------------------------------------------
    def serving_started(self) -> None:
        """Serving starts now: each family's serving so far was warm-up; every compile from now on is serving."""
        self._serving = True
        for family in list(self.families.values()):
            self.safely("serving start", family.serving_started)

    def phase_changed(self) -> None:
        for family in list(self.families.values()):
            family.forget_fast()

    def maybe_flush(self) -> None:
        if time.monotonic() - self._flushed_at >= self.policy.flush_seconds:
            self.safely("flush", self.flush)

    def flush(self, final: bool = False) -> None:
        self._flushed_at = time.monotonic()
        if final:
            for pending in list(self._pending.values()):
                self._settle(pending)
        ledger.flush([family.ledger for family in list(self.families.values())], final)

    # -- families -------------------------------------------------------------------------------------------
    def watches(self, kernel: str) -> bool:
        """Whether the rule watches the kernel `module:qualname`."""
        return self.rule.watches(kernel)

    def _family_of(self, owner: object) -> KernelFamily | None:
        """The family of a JITFunction or an Autotuner (made, and its family event written, at the first ask)."""
        known = self._owners.get(id(owner))
        if known is not None and known[0] is owner:
            return known[1]
        jf = owner
        while not hasattr(jf, "params") and hasattr(jf, "fn"):  # an Autotuner or Heuristics over the JITFunction
            jf = jf.fn
        kernel = f"{jf.fn.__module__}:{jf.fn.__qualname__}"
        family = None
        if self.watches(kernel):
            tuning = jf is not owner
            name = f"triton:{kernel.replace(':', '.')}" + (":autotune" if tuning else "")
            family = self.families.get(name)
            if family is None:
                if tuning:
                    names = list(owner.keys)
                    fields, describe_key = [*names, "dtypes"], lambda key: tuning_fields(names, key)
                else:
                    params = list(jf.params)
                    fields = [param.name for param in params] + [OPTIONS]
                    describe_key = lambda key: describe(params, key, self._jit_names)
                family = self.families[name] = KernelFamily(
                    name,
                    kernel,
                    fields,
                    describe_key,
                    self.sink,
                    self._triton.get("version"),
                    self.policy.flush_seconds,
                    self._serving,
                )
                family.family_event(0)
        self._owners[id(owner)] = (owner, family)
        return family

    def _counting_entry(self, jf: object, entry: tuple) -> tuple:
        """A new device's cache entry of a kernel, its kernel_cache counting (where the rule watches the kernel)."""
        try:
            if self.active and self.watches(f"{jf.fn.__module__}:{jf.fn.__qualname__}"):
                self._counted[id(jf)] = jf
                return (counting(CountingCache, entry[0], self, jf), *entry[1:])
        except Exception as exc:  # noqa: BLE001
            self.internal_error("install", exc)
        return entry

    def _used(self, cache: dict) -> KernelFamily | None:
        """The family of a counting dict in use, which from now on forgets the dict's fast table with its own."""
        family = self._family_of(cache._owner)
        if family is not None:
            family.caches.setdefault(id(cache), cache)
        return family

    def _adopt_kernel(self, jf: object, create_binder: Callable) -> None:
        """A kernel made before install: its later devices' caches count; so do its existing ones, except under
        Triton's async compile mode (its pending compiles keep the old dict), where its hits are not counted."""
        if not self.watches(f"{jf.fn.__module__}:{jf.fn.__qualname__}"):
            return
        caches = jf.device_caches
        caches.default_factory = lambda: self._counting_entry(jf, create_binder(jf))
        for device, entry in list(caches.items()):
            if type(entry[0]) is CountingCache:
                continue
            family = self._family_of(jf)
            for key in list(entry[0]):
                family.compiled(key, "preexisting", None, "compile", None)
            if self._triton["async"].active_mode.get() is not None:
                family.every_lookup_counted = False
                family.family_event(0)
                continue
            caches[device] = self._counting_entry(jf, entry)
            self._used(caches[device][0])

    def _adopt_tuner(self, tuner: object) -> None:
        try:
            if self.active and type(tuner.cache) is not TuningCache:
                family_kernel = tuner
                while not hasattr(family_kernel, "params") and hasattr(family_kernel, "fn"):
                    family_kernel = family_kernel.fn
                if self.watches(f"{family_kernel.fn.__module__}:{family_kernel.fn.__qualname__}"):
                    existing = dict(tuner.cache)
                    tuner.cache = counting(TuningCache, {}, self, tuner)
                    self._counted[id(tuner)] = tuner
                    if existing:
                        family = self._used(tuner.cache)
                        for key in existing:
                            family.compiled(key, "preexisting", None, "compile", None)
                        dict.update(tuner.cache, existing)
        except Exception as exc:  # noqa: BLE001
            self.internal_error("install", exc)

    # -- compiles: Triton's hooks ---------------------------------------------------------------------------
    def _cache_hook(self, **kwargs: object) -> object:
        if self.active:
            frame = sys._getframe(1)
            self.safely("compile", lambda: self._compiling(kwargs, frame))
        previous = self._prev.get("jit_cache_hook")
        skip = previous(**kwargs) if previous is not None else None
        if self.active and skip:  # a hook below skipped the compile: nothing cached
            self.safely("compile", lambda: self._skipped(self._pending.pop(self._pending_key(kwargs), None)))
        elif self.active and self.policy.dry and self.policy.compile == "skip":
            self.safely("compile", lambda: self._dry_skipped(kwargs))
            return True
        return skip

    def _post_compile_hook(self, **kwargs: object) -> object:
        if self.active:
            self.safely("compile", lambda: self._compiled(kwargs))
        previous = self._prev.get("jit_post_compile_hook")
        return previous(**kwargs) if previous is not None else None  # last: if it raises, the compile is recorded

    def _compilation_listener(self, *, src, metadata, metadata_group, times, cache_hit) -> None:
        if self.active:
            self.safely("compile", lambda: self._watch(src, times))
        previous = self._prev.get("listener")
        if previous is not None:
            previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit)

    def _pending_key(self, kwargs: dict) -> tuple[int, str]:
        jf, device = kwargs["fn"].jit_function, kwargs["compile"]["device"]
        return id(jf.device_caches[device][0]), kwargs["key"]

    def _compiling(self, kwargs: dict, frame: object) -> None:
        jf, info = kwargs["fn"].jit_function, kwargs["compile"]
        cache = jf.device_caches[info["device"]][0]
        family = self._used(cache) if type(cache) is CountingCache else self._family_of(jf)
        if family is None:
            return
        for value in (info.get("constants") or {}).values():
            if hasattr(value, "cache_key") and hasattr(value, "fn"):
                self._jit_names.setdefault(value.cache_key, value.fn.__qualname__)
        where = self._reader.read(frame)
        launched = not (dry.LAUNCH_WARMUP.get() if self.policy.dry else kwargs["is_manual_warmup"])
        phase = family.ledger.phase(where.phase, launched)
        self._pending[self._pending_key(kwargs)] = _Pending(
            family,
            kwargs["key"],
            phase,
            where,
            launched,
            time.perf_counter(),
            threading.get_ident(),
            family.ledger.compile_began(phase, where.site, where.stack, kwargs["key"]),
        )
        if not self._target_written:
            target = jf.device_caches[info["device"]][2]
            capability = getattr(target, "arch", None)
            if isinstance(capability, int):
                self._write_target(f"sm_{capability}{'a' if capability >= 90 else ''}")

    def _compiled(self, kwargs: dict) -> None:
        pending = self._pending.pop(self._pending_key(kwargs), None)
        if pending is not None:
            self._record(pending, time.perf_counter() - pending.started, "compile")
        jf, device = kwargs["fn"].jit_function, kwargs["compile"]["device"]
        entry = jf.device_caches[device]
        if type(entry[0]) is not CountingCache and self._triton["async"].active_mode.get() is None:
            jf.device_caches[device] = self._counting_entry(jf, entry)  # a kernel made before install
            if type(jf.device_caches[device][0]) is CountingCache:
                self._used(jf.device_caches[device][0])

    def _dry_skipped(self, kwargs: dict) -> None:
        """--dry --compile skip: the variant is recorded, not compiled; its cache holds a stand-in from now on."""
        pending = self._pending.pop(self._pending_key(kwargs), None)
        if pending is not None:
            self._record(pending, None, "skip")
        jf = kwargs["fn"].jit_function
        dict.__setitem__(jf.device_caches[kwargs["compile"]["device"]][0], kwargs["key"], dry.DryKernel())

    def _skipped(self, pending: _Pending | None) -> None:
        if pending is not None:
            pending.family.ledger.compile_ended(pending.start, time.perf_counter() - pending.started, "skipped")

    def _record(self, pending: _Pending, seconds: float | None, origin: str) -> None:
        pending.family.ledger.compile_ended(pending.start, seconds, "skipped" if origin == "skip" else "returned")
        pending.family.compiled(pending.key, pending.phase, seconds, origin, pending.where)
        if pending.launched:
            pending.family.dispatched(pending.key, pending.phase, pending.where)
        self.maybe_flush()

    def _settle(self, pending: _Pending) -> None:
        """A compile whose post hook never came to us (a hook above raised first): recorded with the listener's
        time, where it saw the compile."""
        for identity, candidate in list(self._pending.items()):
            if candidate is pending:
                del self._pending[identity]
                self._record(pending, pending.listener_seconds, "compile")

    def _watch(self, src: object, times: object) -> None:
        jf = getattr(src, "fn", None)
        if jf is None or not isinstance(jf, self._triton["JITFunction"]):
            return
        mine = [p for p in self._pending.values() if p.family is self._family_of(jf)]
        for pending in mine:
            if pending.thread == threading.get_ident():
                pending.listener_seconds = times.total / 1e6
        if mine or self._family_of(jf) is None:
            return
        from triton import knobs

        if knobs.runtime.jit_cache_hook is not self._ours["jit_cache_hook"]:  # else: a direct triton.compile()
            self.internal_error(
                "compile",
                f"{jf.fn.__module__}:{jf.fn.__qualname__} compiled without mlacheck's jit_cache_hook: the slot was "
                "replaced without chaining onto it (its compiles since are missing); mlacheck's hooks are back on top",
            )
            for slot in ("jit_cache_hook", "jit_post_compile_hook"):
                if getattr(knobs.runtime, slot) is not self._ours[slot]:
                    self._chain(knobs.runtime, slot)

    # -- hits -----------------------------------------------------------------------------------------------
    def looked_up(self, cache: CountingCache, key: object, default: object, frame: object) -> object:
        """A kernel_cache lookup the fast table did not serve: a hit is counted in its phase (a serving one is fast
        from now on); a miss is the compile's to record."""
        value = dict.get(cache, key, default)
        if value is None or value is default or not self.active:
            return value
        try:
            pending = self._pending.get((id(cache), key))
            if pending is not None:
                if type(value).__name__ == "FutureKernel":
                    return value  # an async compile in flight: its post hook records it and its launch
                self._settle(pending)
            family = self._used(cache)
            if family is not None:
                launched = not (
                    dry.LAUNCH_WARMUP.get() if self.policy.dry else getattr(frame, "f_locals", {}).get("warmup")
                )
                where = self._reader.read(frame)
                counter = family.dispatched(key, family.ledger.phase(where.phase, launched), where)
                if where.phase is None and launched:
                    cache._fast[key] = (counter, value)
                self.maybe_flush()
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            self.internal_error("lookup", exc)
        return value

    def tuning_looked_up(self, cache: TuningCache, key: object, frame: object) -> bool:
        """`key in autotuner.cache` not served by the fast table: a hit is a counted dispatch of the tuning."""
        found = dict.__contains__(cache, key)
        if found and self.active:
            try:
                family = self._used(cache)
                where = self._reader.read(frame)
                counter = family.dispatched(key, family.ledger.phase(where.phase, True), where)
                if where.phase is None:
                    cache._fast[key] = counter
                self.maybe_flush()
            except Exception as exc:  # noqa: BLE001
                self.internal_error("lookup", exc)
        return found

    def tuned(self, cache: TuningCache, key: object, frame: object) -> None:
        """A tuning key entered an autotuner's cache: a tuning (its time: its configs' benchmarks), and the launch
        that follows is its dispatch."""
        if not self.active:
            return
        try:
            cache._fast.pop(key, None)
            tuner = cache._owner
            family = self._used(cache)
            if family is None:
                return
            where = self._reader.read(frame)
            phase = family.ledger.phase(where.phase, True)
            seconds = None if self.policy.dry else self._bench_seconds.pop(id(tuner), 0.0)
            family.compiled(key, phase, seconds, "skip" if self.policy.dry else "compile", where)
            family.dispatched(key, phase, where)
            self.maybe_flush()
        except Exception as exc:  # noqa: BLE001
            self.internal_error("tuning", exc)

    def _timed_bench(self, bench: Callable) -> Callable:
        def timed(tuner: object, *args: object, **kwargs: object) -> object:
            started = time.perf_counter()
            try:
                return bench(tuner, *args, **kwargs)
            finally:
                self._bench_seconds[id(tuner)] = self._bench_seconds.get(id(tuner), 0.0) + time.perf_counter() - started

        timed.__wrapped__ = bench
        return timed

    # -- events -----------------------------------------------------------------------------------------------
    def _write_target(self, arch: str) -> None:
        self._target_written = True
        try:
            self.sink.write(events.context_event({"target_arch": arch}))
        except Exception as exc:  # noqa: BLE001
            self.internal_error("write", exc)

    def safely(self, where: str, action: Callable[[], object]) -> None:
        """Run a capture action; a failure becomes an internal error, never an exception in the program."""
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - capture never raises into the program
            self.internal_error(where, exc)

    def internal_error(self, where: str, error: object) -> None:
        """What capture could not see or do (the run then cannot pass); never raises."""
        events.write_internal_error(self.sink, f"triton: {where}", error)


def _guarded(serialize: Callable) -> Callable:
    """Triton json-serializes the constexprs of every compile once any hook is set; one JSON cannot encode would
    make the launch itself raise (jit.py `_call_hook`). vLLM's jit_monitor guards it the same way."""

    def guarded(*args: object, **kwargs: object) -> object:
        try:
            return serialize(*args, **kwargs)
        except (TypeError, ValueError):
            return None

    guarded._json_guarded = True
    return guarded
