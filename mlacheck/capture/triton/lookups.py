"""Hits: the lookups of the counting dicts (`families.py`) that their fast tables did not serve, and tunings. A hit
is counted in its phase (a serving one is served by the fast table from then on); a kernel_cache miss is the
compile's to record; a key entering an autotuner's cache is a tuning, timed as the sum of its configs' benchmarks
(`Autotuner._bench`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mlacheck.capture.phase import SERVING
from mlacheck.capture.triton.compiles import dry_launch_warmup
from mlacheck.capture.triton.families import CountingCache, TuningCache
from mlacheck.capture.triton.runtime import still_compiling


class Lookups:
    """The part of `TritonCapture` that counts hits and records tunings (its state: `_start_lookups`); the counting
    dicts report to it."""

    def _start_lookups(self) -> None:
        self._bench_seconds: dict[int, float] = {}  # id(Autotuner) -> its benchmark time since its last tuning

    def looked_up(self, cache: CountingCache, key: object, default: object, frame: object) -> object:
        """A kernel_cache lookup the fast table did not serve: a hit is counted in its phase (a serving one is fast
        from now on); a miss is the compile's to record. A hit on an async compile (Triton's AsyncCompileMode: a
        FutureKernel) is counted too, never made fast: its post hook records the compile and the launch that began it,
        not this one. A serving launch that finds it still compiling waits for it (the launch reads the kernel through
        `FutureKernel.result()`): the wait is noted, and the post hook, which that result() calls when the compile
        is done, records it as the launch's stall (`CompileHooks._compiled`)."""
        value = dict.get(cache, key, default)
        if value is None or value is default or not self.active:
            return value
        try:
            future = type(value).__name__ == "FutureKernel"
            pending = self._pending.get((id(cache), key))
            if pending is not None and not future:
                self._settle(pending)
            family = self._used(cache)
            if family is not None:
                launched = not (
                    dry_launch_warmup() if self.policy.dry else getattr(frame, "f_locals", {}).get("warmup")
                )
                where = self._reader.read(frame)
                phase = family.ledger.phase(where.phase, launched)
                counter = family.dispatched(key, phase, where)
                if future and launched and phase == SERVING and still_compiling(value):
                    self._waits.setdefault((id(cache), key), []).append((family, key, where, time.perf_counter()))
                elif where.phase is None and launched and not future:
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
