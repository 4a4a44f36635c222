"""Compiles, seen through Triton's own hooks (`<triton>.knobs`, 3.6 to 3.9 and the forks that keep them), chained
onto whatever each slot held, never displacing it: `runtime.jit_cache_hook` before a compile (the phase and site are
read from the launching thread's stack there, and its `compile_start` is written), `runtime.jit_post_compile_hook`
after it (its time; a compile the launch goes on to run is also that launch's dispatch), and `compilation.listener`,
always on top of what the program puts there (`slots.py: Outermost`), which sees every compile: a direct
`triton.compile()`, and a watchdog: a JIT compile that reached the compiler without passing mlacheck's hook means
someone replaced the slot without chaining (the hooks go back on top, and the run cannot pass). Under `--dry --compile
skip` the cache hook records the variant and skips its compile.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from mlacheck import events
from mlacheck.capture.phase import SERVING, decide
from mlacheck.capture.stack import Where
from mlacheck.capture.triton.families import CountingCache, KernelFamily
from mlacheck.capture.triton.runtime import future_kernel_of, kernel_name, still_compiling
from mlacheck.keys import typed

HOOKS = (("runtime", "jit_cache_hook"), ("runtime", "jit_post_compile_hook"))  # chained
LISTENER = ("compilation", "listener")  # guarded (`slots.py: Outermost`)


class _Pending:
    """A compile between mlacheck's two hooks. A plain class, compared by identity: a dataclass's generated methods
    would cost 0.2 ms in every process that imports Triton."""

    __slots__ = (
        "family",
        "key",
        "phase",
        "where",
        "launched",
        "started",
        "thread",
        "start",
        "mode",
        "listener_seconds",
    )

    def __init__(
        self,
        family: KernelFamily,
        key: str,
        phase: str,
        where: Where,
        launched: bool,  # the launch goes on to run it (not JITFunction.warmup)
        started: float,
        thread: int,
        start: int | None,  # its compile_start
        mode: object,  # the AsyncCompileMode it was submitted to (None: it compiles in the launch)
    ) -> None:
        self.family, self.key, self.phase, self.where, self.launched = family, key, phase, where, launched
        self.started, self.thread, self.start, self.mode = started, thread, start, mode
        self.listener_seconds: float | None = None


class CompileHooks:
    """The part of `TritonCapture` that sees compiles (its state: `_start_compiles`)."""

    def _start_compiles(self) -> None:
        self._pending: dict[tuple[int, str], _Pending] = {}  # (id(kernel_cache), key) -> the compile in flight
        # (id(kernel_cache), key) -> the serving launches waiting for its async compile: (family, key, where, since)
        self._waits: dict[tuple[int, str], list[tuple[KernelFamily, str, Where, float]]] = {}
        self._prev: dict[str, object] = {}
        self._ours = {
            "jit_cache_hook": self._cache_hook,
            "jit_post_compile_hook": self._post_compile_hook,
        }
        self._listening = threading.local()  # .src: the compile whose event mlacheck's listener is passing down
        self._jit_names: dict[str, str] = {}  # a JITFunction constexpr's cache_key -> its name

    def _chain_hooks(self) -> None:
        for group, slot in HOOKS:
            self._chain(getattr(self.runtime.knobs, group), slot)
        self._guard_listener(getattr(self.runtime.knobs, LISTENER[0]))

    def _chain(self, owner: object, slot: str) -> None:
        """Our hook in the slot, calling what the slot held; given back at remove only where the slot still holds it."""
        self._prev[slot] = getattr(owner, slot)
        ours = self._ours[slot]
        setattr(owner, slot, ours)

        def undo() -> None:
            if getattr(owner, slot) is ours:
                setattr(owner, slot, self._prev[slot])

        self._patches.on_undo(undo)

    # -- the hooks ----------------------------------------------------------------------------------------------
    def _cache_hook(self, **kwargs: object) -> object:
        if self.active:
            frame = self._triton_frame(sys._getframe(1))
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

    def _compilation_listener(self, inner: object, kwargs: dict) -> object:
        """On top of the program's listener `inner`: the compile is watched once, then passed down. A listener of the
        program's that calls what it read from the slot (mlacheck's, on top of the one below it) calls back here
        with the same compile: passed down to the one below, not watched again."""
        src, passing = kwargs.get("src"), getattr(self._listening, "src", None)
        if self.active and src is not passing:
            self.safely("compile", lambda: self._watch(src, kwargs.get("times"), kwargs.get("cache_hit")))
        if inner is None:
            return None
        self._listening.src = src
        try:
            return inner(**kwargs)
        finally:
            self._listening.src = passing

    def _triton_frame(self, frame: FrameType) -> FrameType:
        """The innermost frame of this Triton's own code (the `_call_hook` that called the slot), above the hooks that
        others chained on top of mlacheck's (TokenSpeed's compile monitor, vLLM's jit_monitor): the stack is read
        from there outward, so that a hook is never the site."""
        package, found = self.rule.module, frame
        while found is not None and (found.f_globals.get("__name__") or "").partition(".")[0] != package:
            found = found.f_back
        return found if found is not None else frame

    # -- what they record ---------------------------------------------------------------------------------------
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
        launched = not (dry_launch_warmup() if self.policy.dry else kwargs["is_manual_warmup"])
        phase = family.ledger.phase(where.phase, launched)
        identity, mode = self._pending_key(kwargs), self.runtime.async_compile.active_mode.get()
        earlier = self._pending.get(identity)
        if earlier is not None and mode is not None and earlier.mode is mode:
            self._joined(identity, (mode, cache), family, kwargs["key"], phase, where, launched)
            return
        self._pending[identity] = _Pending(
            family,
            kwargs["key"],
            phase,
            where,
            launched,
            time.perf_counter(),
            threading.get_ident(),
            family.ledger.compile_began(phase, where.site, where.stack, kwargs["key"]),
            mode,
        )
        if not self._target_written:
            target = jf.device_caches[info["device"]][2]
            capability = getattr(target, "arch", None)
            if isinstance(capability, int):
                self._write_target(f"sm_{capability}{'a' if capability >= 90 else ''}")

    def _joined(
        self, identity: tuple, owners: tuple, family: KernelFamily, key: str, phase: str, where, launched
    ) -> None:
        """A launch that missed while its key's async compile is in flight in the same AsyncCompileMode (Triton 3.6
        keeps the FutureKernel in the mode, not in the cache): the mode gives it that compile's FutureKernel, so it
        compiles nothing of its own. It is a dispatch of the variant and, on the serving path with the compile not
        done, a wait (`_compiled` times it), as a launch that found the FutureKernel in the cache (`looked_up`)."""
        if not launched:
            return
        family.dispatched(key, phase, where)
        if phase == SERVING and still_compiling(future_kernel_of(*owners, key)):
            self._waits.setdefault(identity, []).append((family, key, where, time.perf_counter()))
        self.maybe_flush()

    def _compiled(self, kwargs: dict) -> None:
        """The post hook: a compile is done. Under AsyncCompileMode it comes from `FutureKernel.result()` once the
        compile returned, so each serving launch that found the compile still running (`Lookups.looked_up`) waited
        until now: that wait is its stall, a `compile` record of the serving path with origin `wait` (after the
        compile's own record, which keeps the phase it began in)."""
        identity = self._pending_key(kwargs)
        pending = self._pending.pop(identity, None)
        if pending is not None:
            self._record(pending, time.perf_counter() - pending.started, "compile")
        for family, key, where, since in self._waits.pop(identity, ()):
            family.compiled(key, SERVING, time.perf_counter() - since, "wait", where)
        self._count_compiled(kwargs["fn"].jit_function, kwargs["compile"]["device"])

    def _dry_skipped(self, kwargs: dict) -> None:
        """--dry --compile skip: the variant is recorded, not compiled; its cache holds a stand-in from now on."""
        pending = self._pending.pop(self._pending_key(kwargs), None)
        if pending is not None:
            self._record(pending, None, "skip")
        jf = kwargs["fn"].jit_function
        from mlacheck.capture.triton.dry import DryKernel

        dict.__setitem__(jf.device_caches[kwargs["compile"]["device"]][0], kwargs["key"], DryKernel())

    def _skipped(self, pending: _Pending | None) -> None:
        if pending is not None:
            pending.family.ledger.compile_ended(pending.start, time.perf_counter() - pending.started, "skipped")

    def _record(self, pending: _Pending, seconds: float | None, origin: str) -> None:
        start = pending.start if origin != "skip" else None  # (a returned compile's record names it)
        pending.family.ledger.compile_ended(pending.start, seconds, "skipped" if origin == "skip" else "returned")
        pending.family.compiled(pending.key, pending.phase, seconds, origin, pending.where, start)
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

    def _watch(self, src: object, times: object, cache_hit: bool) -> None:
        """The listener: the compiler's own time for a compile in flight; a direct `triton.compile()` of a watched
        kernel is an unwatched compile (`_direct`), and so is one of a kernel's IR (`_ir_compile`); a compile of one that passed no mlacheck hook otherwise is an
        internal error, and the hooks go back on top."""
        jf = getattr(src, "fn", None)
        if jf is None and isinstance(getattr(src, "path", None), str):
            self._ir_compile(src, times.total / 1e6)
            return
        if jf is None or not isinstance(jf, self.runtime.jit.JITFunction):
            return
        mine = [p for p in self._pending.values() if p.family is self._family_of(jf)]
        for pending in mine:
            if pending.thread == threading.get_ident():
                pending.listener_seconds = times.total / 1e6
        if mine or self._family_of(jf) is None:
            return
        knobs = self.runtime.knobs
        if knobs.runtime.jit_cache_hook is self._ours["jit_cache_hook"]:
            self._direct(jf, src, times.total / 1e6)  # a disk cache hit too, as a launch's is a compile
        else:
            self.internal_error(
                "compile",
                f"{kernel_name(jf)} compiled without mlacheck's jit_cache_hook: the slot was replaced without "
                "chaining onto it (its compiles since are missing); mlacheck's hooks are back on top",
            )
            for slot in ("jit_cache_hook", "jit_post_compile_hook"):
                if getattr(knobs.runtime, slot) is not self._ours[slot]:
                    self._chain(knobs.runtime, slot)

    def _direct(self, jf: object, src: object, seconds: float) -> None:
        """A build by a direct `triton.compile()` (a launcher that keeps what it compiled itself): no cache of the
        kernel holds it, so no dispatch accounts for it; it is an unwatched compile of that kernel (MLA007 on the
        serving path), keyed by its constexprs (by name where Triton gives their positions)."""
        family = self._family_of(jf)
        where = self._reader.read(self._triton_frame(sys._getframe()))
        constants = getattr(src, "constexprs", None) or getattr(src, "constants", None) or {}
        names = list(getattr(jf, "arg_names", None) or ())
        key = {_parameter(name, names): typed(value) for name, value in constants.items()}
        phase = family.ledger.phase(where.phase, False)
        family.ledger.write(
            events.unwatched_compile_event(
                f"{self.rule.module}.compile", kernel_name(jf), key, seconds, phase, where.site, where.stack
            )
        )

    def _ir_compile(self, src: object, seconds: float) -> None:
        """A direct compile of a kernel's IR (`triton.compile("kernel.ttir")`: an IRSource, no Python function
        behind it): no kernel family can hold it, so it is an unwatched compile named by the IR's kernel, keyed by
        its file and the IR's hash (MLA007 on the serving path; a disk cache hit too)."""
        where = self._reader.read(self._triton_frame(sys._getframe()))
        name = str(getattr(src, "name", None) or "").lstrip("@") or os.path.basename(src.path)
        key = {"ir_file": src.path, "ir_sha256": src.hash()[:16]}
        event = events.unwatched_compile_event(
            f"{self.rule.module}.compile",
            f"IR:{name}",
            key,
            seconds,
            decide(where.phase, self._serving, False),
            where.site,
            where.stack,
        )
        self.sink.write(event)


def _parameter(name: object, names: list[str]) -> str:
    """A constexpr's parameter name: Triton 3.x keys an ASTSource's constexprs by position ((3,)) or by name."""
    if isinstance(name, tuple) and len(name) == 1 and isinstance(name[0], int) and name[0] < len(names):
        return names[name[0]]
    return str(name)


def guarded(serialize: Callable) -> Callable:
    """Triton json-serializes the constexprs of every compile once any hook is set; one JSON cannot encode would
    make the launch itself raise (jit.py `_call_hook`). vLLM's jit_monitor guards it the same way."""

    def guarded_serialize(*args: object, **kwargs: object) -> object:
        try:
            return serialize(*args, **kwargs)
        except (TypeError, ValueError):
            return None

    guarded_serialize._json_guarded = True
    return guarded_serialize


def dry_launch_warmup() -> bool:
    """Under --dry: whether the launch now is a warm-up's (the dry module is loaded only under --dry)."""
    from mlacheck.capture.triton import dry

    return dry.LAUNCH_WARMUP.get()
