"""Kind "class_dict": a dict held by a class attribute (SGLang's DSA indexer `CuteDSLPagedMQALogitsRunner.kernel_cache`).
It is replaced on the class that defines it (found along the named class's MRO), so every subclass and instance that
reads it through its class shares the recording dict. The rule's `cache` is the path to the class, then the
attribute: `Runner.kernel_cache`."""

from __future__ import annotations

from collections.abc import Callable

from mlacheck.capture.caches.recording import DictCache


class ClassDict(DictCache):
    def locate(self) -> tuple[object, Callable[[object], None]]:
        class_path, _, attribute = self.family.cache.rpartition(".")
        named = self.patches.resolve(self.module, class_path)
        where = f"{self.family.module}.{class_path}"
        if not isinstance(named, type):
            raise self.patches.stale(f"{where} is a {type(named).__name__}, not a class")
        owner = next((cls for cls in named.__mro__ if attribute in vars(cls)), None)
        if owner is None:
            raise self.patches.stale(f"{where} has no class attribute {attribute!r}")
        return vars(owner)[attribute], lambda value: setattr(owner, attribute, value)
