"""The kernels' caches, as the Triton capture holds them: the counting dicts put in place of each watched kernel's
`kernel_cache` and each autotuner's `cache` (for kernels made from now on, through `JITFunction.create_binder` and
`Autotuner.__init__`, and for those already made, at install), given back at remove; the audit of what went past
them; and the kernels Triton's interpreter runs, which compile nothing and are named.

The audit runs at each counts flush, as a rule file's cache adapter's does (`CacheAdapter.audit`): a counting dict
the program replaced (a kernel's `device_caches` entry, or the `device_caches` rebound, or an autotuner's `cache`)
no longer counts its launches or sees its tunings, and a variant in a cache that no compile, tuning or listing brought
there went past capture. Each is one `unseen` event of the kernel's family, said once: the run cannot pass.
"""

from __future__ import annotations

from collections.abc import Callable

from mlacheck import events
from mlacheck.capture.triton.families import CountingCache, KernelFamily, TuningCache, counting
from mlacheck.capture.triton.runtime import INTERPRETED, kernel_name
from mlacheck.keys import key_text


class Kernels:
    """The part of `TritonCapture` that holds the kernels' caches (its state: `_start_kernels`)."""

    def _start_kernels(self) -> None:
        self._counted: dict[int, object] = {}  # id -> each JITFunction or Autotuner given a counting dict
        self._left: dict[tuple[int, object], int] = {}  # (id(JITFunction), device) -> id of the program's dict left
        # in place (Triton's async compile mode was on at install: its pending compiles keep that dict)
        self._reported: set[int] = set()  # ids of the replaced caches the audit named
        self._named_interpreted = False

    # -- counting dicts ---------------------------------------------------------------------------------------
    def _counting_entry(self, jf: object, entry: tuple) -> tuple:
        """A new device's cache entry of a kernel, its kernel_cache counting (where the rule watches the kernel)."""
        try:
            if self.active and self.watches(kernel_name(jf)):
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

    def _count_compiled(self, jf: object, device: object) -> None:
        """After a compile: the kernel's cache on `device` counts from now on where it did not because of Triton's
        async compile mode at install, or because the kernel was never given a counting dict (a cache the program
        put in place of mlacheck's is the audit's to report, and stays the program's)."""
        entry = jf.device_caches[device]
        if type(entry[0]) is CountingCache or self.runtime.async_compile.active_mode.get() is not None:
            return
        if id(jf) in self._counted and self._left.get((id(jf), device)) != id(entry[0]):
            return
        self._left.pop((id(jf), device), None)
        jf.device_caches[device] = self._counting_entry(jf, entry)
        if type(jf.device_caches[device][0]) is CountingCache:
            self._used(jf.device_caches[device][0])

    def _adopt_kernel(self, jf: object, create_binder: Callable) -> None:
        """A kernel made before install: its later devices' caches count; so do its existing ones, except under
        Triton's async compile mode (its pending compiles keep the old dict), where its hits are not counted."""
        if not self.watches(kernel_name(jf)):
            return
        caches = jf.device_caches
        caches.default_factory = lambda: self._counting_entry(jf, create_binder(jf))
        for device, entry in list(caches.items()):
            if type(entry[0]) is CountingCache:
                continue
            family = self._family_of(jf)
            for key in list(entry[0]):
                family.compiled(key, "preexisting", None, "compile", None)
            if self.runtime.async_compile.active_mode.get() is not None:
                self._left[(id(jf), device)] = id(entry[0])
                family.every_lookup_counted = False
                family.family_event(0)
                continue
            caches[device] = self._counting_entry(jf, entry)
            self._used(caches[device][0])

    def _adopt_tuner(self, tuner: object) -> None:
        """An autotuner (made now, or before install): its cache counts where the rule watches its kernel; one over
        an interpreted kernel tunes nothing compiled, and is named."""
        try:
            if not self.active or type(tuner.cache) is TuningCache:
                return
            jf = self.runtime.kernel_of(tuner)
            if jf is None:
                self._name_interpreted()
            elif self.watches(kernel_name(jf)):
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

    def _give_back_caches(self) -> None:
        """Each counting dict back to a plain dict of the same entries (not while an async compile may write one)."""
        if self.runtime.async_compile.active_mode.get() is not None:
            return
        for owner in self._counted.values():
            if type(getattr(owner, "cache", None)) is TuningCache:
                owner.cache = dict(owner.cache)
            for device, entry in list(getattr(owner, "device_caches", {}).items()):
                if type(entry[0]) is CountingCache:
                    owner.device_caches[device] = (dict(entry[0]), *entry[1:])
        self._counted.clear()

    # -- interpreted kernels ----------------------------------------------------------------------------------
    def _name_interpreted(self) -> None:
        """The process runs this Triton's kernels interpreted (TRITON_INTERPRET=1): they compile nothing, so there is
        no compile to check; the context says so (once), the report names it."""
        if not self._named_interpreted:
            self._named_interpreted = True
            try:
                self.sink.write(events.context_event({self.rule.module: INTERPRETED}))
            except Exception as exc:  # noqa: BLE001 - capture never raises into the program
                self.internal_error("write", exc)

    # -- the audit ----------------------------------------------------------------------------------------------
    def _audit(self) -> None:
        """What went past the counting dicts since the last flush: an `unseen` event each (once)."""
        for owner in list(self._counted.values()):
            lines = self._audit_tuner(owner) if hasattr(owner, "configs") else self._audit_kernel(owner)
            if lines:
                family = self._family_of(owner)
                for line in lines:
                    family.ledger.unseen(line)

    def _audit_kernel(self, jf: object) -> list[str]:
        lines = []
        for device, entry in list(jf.device_caches.items()):
            cache = entry[0]
            if type(cache) is CountingCache:
                lines += self._unseen_keys(jf, cache, f"{kernel_name(jf)}'s kernel_cache on {device}")
            elif self._left.get((id(jf), device)) != id(cache) and id(cache) not in self._reported:
                self._reported.add(id(cache))
                lines.append(
                    f"{kernel_name(jf)}'s kernel_cache on {device} is not mlacheck's counting dict (the program "
                    f"replaced it, or rebound the kernel's device_caches): its launches were not counted, and the "
                    f"{len(cache)} variant(s) in it are unknown to capture"
                )
        return lines

    def _audit_tuner(self, tuner: object) -> list[str]:
        cache, where = tuner.cache, f"the autotuner of {kernel_name(self.runtime.kernel_of(tuner))}"
        if type(cache) is TuningCache:
            return self._unseen_keys(tuner, cache, f"{where}'s cache")
        if id(cache) in self._reported:
            return []
        self._reported.add(id(cache))
        return [
            f"{where} holds a cache that is not mlacheck's counting dict (the program replaced autotuner.cache): its "
            "tunings since were not seen (a tuning benchmarks every config on the serving path)"
        ]

    def _unseen_keys(self, owner: object, cache: dict, where: str) -> list[str]:
        """The keys in a counting dict that capture never recorded (an insert past it, as from C); each becomes a
        variant of the family from now on, so it is said once."""
        keys = list(dict.keys(cache))
        family = self._family_of(owner) if keys else None  # a kernel not used yet has no family to make
        if family is None:
            return []
        ledger = family.ledger
        unseen = [key for key in keys if key not in ledger.vids]
        if not unseen:
            return []
        keys = [self._key_text(ledger, key) for key in unseen]
        return [
            f"{len(unseen)} variant(s) entered {where} past mlacheck (no compile or tuning of it was seen): "
            f"{'; '.join(keys)}; whether they compiled on the serving path is unknown"
        ]

    @staticmethod
    def _key_text(ledger: object, key: object) -> str:
        """A key as its fields read (it is a variant of the family from now on), or as it is where it does not read
        as one (not a key Triton made)."""
        try:
            return key_text(ledger.described[ledger.vid(key)][0])
        except Exception:  # noqa: BLE001 - a key of the program's own making
            return repr(key)[:200]
