"""TritonCapture: every kernel one Triton of a process compiles, each a kernel family, installed when that Triton is
imported. The Triton is the rule's (`[triton]`'s `module`: stock `triton`, or a fork that keeps Triton's runtime,
such as `tokenspeed_triton`), found by its import name (`runtime.py`); each Triton in a process has a capture of its
own, and its families are named by it (`triton:...`, `tokenspeed_triton:...`).

The capture is made of parts, one job each: `compiles.py` (Triton's hooks: every compile), `lookups.py` (the hits
the counting dicts did not serve, and tunings), `kernels.py` (the counting dicts themselves, the audit of what went
past them, interpreted kernels). This module installs them, keeps the families and takes the agent's calls.

Uninstall gives back each slot that still holds mlacheck's hook; a slot someone chained on top of keeps it, as a
pass-through. Nothing here raises into the program: a failure is an `internal_error` event.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable

from mlacheck import events, sinks
from mlacheck.capture import ledger
from mlacheck.capture.install import Patches
from mlacheck.capture.policy import CapturePolicy
from mlacheck.capture.stack import StackReader
from mlacheck.capture.triton.compiles import CompileHooks, guarded
from mlacheck.capture.triton.families import KernelFamily
from mlacheck.capture.triton.kernels import Kernels
from mlacheck.capture.triton.lookups import Lookups
from mlacheck.capture.triton.runtime import TritonRuntime, kernel_name, load
from mlacheck.capture.triton.slots import Slots
from mlacheck.rulefiles import plain
from mlacheck.rulefiles.plain import PhaseRule, Triton
from mlacheck.sinks import EventSink

AUTOTUNE = ":autotune"
HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE


class TritonCapture(CompileHooks, Lookups, Kernels, Slots):
    """The kernels of one Triton of one process (the agent calls install, serving_started, phase_changed, flush,
    after_fork and remove, as for a rule file's family)."""

    def __init__(
        self,
        rule: dict | Triton,
        sink: EventSink,
        policy: CapturePolicy = CapturePolicy(),
        phases: tuple[PhaseRule, ...] = (),
    ) -> None:
        self.rule = plain.triton(rule) if isinstance(rule, dict) else rule
        self.sink, self.policy = sink, policy
        self.runtime: TritonRuntime | None = None
        self.families: dict[str, KernelFamily] = {}
        self.installed = False
        self.active = False
        self._owners: dict[int, tuple[object, KernelFamily | None]] = {}  # id(JITFunction or Autotuner) -> family
        self._reader = StackReader(frozenset(), phases, (self.rule.module, *self.rule.site_skip))
        self._patches = Patches(self.rule.module)
        self._flushed_at = time.monotonic()
        self._target_written = False
        self._serving = False  # the process marked serving start
        self.on_flush: Callable[[], None] | None = None  # the agent's look for Tritons loaded past its finder
        self._start_compiles()
        self._start_lookups()
        self._start_kernels()

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
        self.runtime = runtime = load(self.rule.module, self.rule.distribution)
        self.active = True
        self._patches.on_undo(self._deactivate)
        self._chain_hooks()
        jit = runtime.jit
        if not any(
            getattr(jit.serialize_specialization_data, mark, False) for mark in ("_vllm_guarded", "_json_guarded")
        ):
            self._patches.replace(jit, "serialize_specialization_data", guarded(jit.serialize_specialization_data))
        JITFunction, Autotuner = jit.JITFunction, runtime.autotuner.Autotuner
        create_binder, tuner_init, bench = JITFunction.create_binder, Autotuner.__init__, Autotuner._bench
        self._patches.replace(JITFunction, "create_binder", lambda jf: self._counting_entry(jf, create_binder(jf)))

        def init(tuner: object, *args: object, **kwargs: object) -> None:
            tuner_init(tuner, *args, **kwargs)
            self._adopt_tuner(tuner)

        self._patches.replace(Autotuner, "__init__", init)
        if self.policy.dry:
            self._install_dry()
        else:
            self._patches.replace(Autotuner, "_bench", self._timed_bench(bench))
        if runtime.interpreted:
            self._name_interpreted()
        self._adopt_existing(create_binder)
        self._patches.on_undo(self._give_back_caches)
        self.installed = True

    def _install_dry(self) -> None:
        """--dry: the dry driver answers for the target arch; launches compile (or are recorded) and never run."""
        from mlacheck.capture.triton import dry  # here: only --dry loads it

        runtime = self.runtime
        backend, capability = dry.target_of(self.policy.target_arch)
        driver = runtime.driver
        saved = driver._active  # not `.active`: reading it would make the real driver, which needs a GPU
        driver.set_active(dry.DryDriver(runtime.gpu_target(backend, capability, 32), self.policy.target_arch))
        self._patches.on_undo(lambda: setattr(driver, "_active", saved))
        self._patches.replace(runtime.jit.JITFunction, "run", dry.dry_run(runtime.jit.JITFunction.run))
        self._patches.replace(runtime.autotuner.Autotuner, "_bench", dry.dry_bench)
        self._write_target(self.policy.target_arch)

    def _adopt_existing(self, create_binder: Callable) -> None:
        """The kernels and autotuners made before install (`instances` of the classes and every subclass of theirs)."""
        kernels = _subclasses(self.runtime.jit.JITFunction)
        either = kernels | _subclasses(self.runtime.autotuner.Autotuner)
        for thing in instances(either):
            if type(thing) in kernels:
                self.safely("install", lambda jf=thing: self._adopt_kernel(jf, create_binder))
            else:
                self.safely("install", lambda tuner=thing: self._adopt_tuner(tuner))

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
        """Keep the counts, after the check of Triton's hook slots (`slots.py`) and the audit of what went past the
        counting dicts (`kernels.py`)."""
        self._flushed_at = time.monotonic()
        if final:
            for pending in list(self._pending.values()):
                self._settle(pending)
        self.safely("hooks", self._check_hooks)
        self.safely("audit", self._audit)
        if self.on_flush is not None and not final:
            self.safely("found", self.on_flush)
        ledger.flush([family.ledger for family in list(self.families.values())], final)

    # -- families -------------------------------------------------------------------------------------------
    def watches(self, kernel: str) -> bool:
        """Whether the rule watches the kernel `module:qualname`."""
        return self.rule.watches(kernel)

    def _family_of(self, owner: object) -> KernelFamily | None:
        """The family of a JITFunction or an Autotuner (made, and its family event written, at the first ask); None
        where the rule does not watch its kernel, or the kernel is interpreted (no JITFunction under it)."""
        known = self._owners.get(id(owner))
        if known is not None and known[0] is owner:
            return known[1]
        jf = self.runtime.kernel_of(owner)
        family = None
        if jf is not None and self.watches(kernel_name(jf)):
            tuning = jf is not owner
            name = self.rule.family_name(kernel_name(jf)) + (AUTOTUNE if tuning else "")
            family = self.families.get(name)
            if family is None:
                family = self.families[name] = self._new_family(name, owner, jf, tuning)
                family.family_event(0)
        self._owners[id(owner)] = (owner, family)
        return family

    def _new_family(self, name: str, owner: object, jf: object, tuning: bool) -> KernelFamily:
        """A kernel's family, keyed by its parameters and options; an autotuner's, by its tuning key (`keys.py`,
        loaded here: a process whose watched kernels never run, as a worker that imports Triton only for a library's
        sake, never loads it)."""
        from mlacheck.capture.triton.keys import OPTIONS, describe, tuning_fields

        if tuning:
            names = list(owner.keys)
            fields, describe_key = [*names, "dtypes"], lambda key: tuning_fields(names, key)
        else:
            params = list(jf.params)
            fields = [param.name for param in params] + [OPTIONS]
            describe_key = lambda key: describe(params, key, self._jit_names)
        return KernelFamily(
            name,
            kernel_name(jf),
            fields,
            describe_key,
            self.sink,
            self.rule.distribution,
            self.runtime.version,
            self.policy.flush_seconds,
            self._serving,
        )

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
        sinks.write_internal_error(self.sink, f"{self.rule.module}: {where}", error)


def instances(classes: set[type]) -> list:
    """Every object the collector tracks whose type is one of `classes` (matched by its type, not by isinstance, which
    reads __class__), in one walk of the objects in C (a process holds hundreds of thousands of them). An instance of
    a heap type refers to its type (a class defined in Python does; one made in C must, since Python 3.9), so where
    every class is one, the objects that refer to one of them hold them all: gc.get_referrers lists those without a
    list of every object (in half the time of gc.get_objects, and a tenth of the instructions, in a worker that
    imported Triton); else every object is looked at."""
    if all(cls.__flags__ & HEAP_TYPE for cls in classes):
        candidates = gc.get_referrers(*classes)
    else:
        candidates = gc.get_objects()
    return list(itertools.compress(candidates, map(classes.__contains__, map(type, candidates))))


def _subclasses(cls: type) -> set[type]:
    """`cls` and every class that has it in its MRO (what issubclass tests for a class of an ordinary metaclass)."""
    found, stack = {cls}, [cls]
    while stack:
        for subclass in type.__subclasses__(stack.pop()):
            if subclass not in found:
                found.add(subclass)
                stack.append(subclass)
    return found
