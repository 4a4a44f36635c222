"""Kind "dict": a dict at the end of an attribute path from the family's module: a module attribute
(tokenspeed_mla's `_compiled_kernels`), or a function's or an object's attribute (FA4's
`_flash_attn_fwd.compile_cache.cache`, the dict inside a JITCache)."""

from __future__ import annotations

from collections.abc import Callable

from mlacheck.capture.caches.recording import DictCache


class AttributeDict(DictCache):
    def locate(self) -> tuple[object, Callable[[object], None]]:
        owner_path, _, attribute = self.family.cache.rpartition(".")
        owner = self.patches.resolve(self.module, owner_path)
        return self.patches.attribute(owner, attribute), lambda value: setattr(owner, attribute, value)
