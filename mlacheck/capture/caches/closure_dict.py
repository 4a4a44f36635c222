"""Kind "closure_dict": a dict held in a closure cell, the cache of a caching decorator (SGLang's `cache_once`,
quack's `quack/cache/jit.py` `jit_cache`). The rule's `cache` is the path to the decorated function, then the name of
the free variable that holds the dict: `_jit_module.result_map`. The cell is looked for in the function and along its
`__wrapped__` chain (a decorator stacked on top of the caching one).

A key is named positionally by the rule's key_fields, as every dict key is; a key of `cache_once`'s form, (the
call's positional arguments, its sorted keyword items), is named by binding it to the decorated function's
signature, and keeps its spelling: `f(a, b)` and `f(a, b=b)` are two entries of that cache (MLA006).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from mlacheck.capture.caches.functools_cache import call_fields
from mlacheck.capture.caches.recording import DictCache


class ClosureDict(DictCache):
    def locate(self) -> tuple[object, Callable[[object], None]]:
        function_path, _, variable = self.family.cache.rpartition(".")
        function = self.patches.resolve(self.module, function_path)
        self._signature = _signature(inspect.unwrap(function))
        cell = _cell(function, variable)
        if cell is None:
            raise self.patches.stale(f"{self.family.module}.{function_path} holds no closure variable {variable!r}")
        try:
            cache = cell.cell_contents
        except ValueError:  # a cell not filled yet
            raise self.patches.stale(f"{self.family.module}.{function_path}'s {variable!r} is empty") from None

        def put(value: object) -> None:
            cell.cell_contents = value

        return cache, put

    def describe(self, key: object) -> tuple[dict[str, object], dict | None]:
        if self._signature is not None and _call_key(key):
            try:
                return call_fields(self._signature, *key)
            except TypeError:  # not a call of the decorated function after all
                pass
        return super().describe(key)


def _call_key(key: object) -> bool:
    """Whether a key is (positional arguments, keyword items), as `cache_once` builds it."""
    return (
        isinstance(key, tuple)
        and len(key) == 2
        and isinstance(key[0], tuple)
        and isinstance(key[1], tuple)
        and all(isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) for item in key[1])
    )


def _signature(function: object) -> inspect.Signature | None:
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None


def _cell(function: object, variable: str):
    """The closure cell of `variable` in `function` or a function it wraps; None where there is none."""
    seen = set()
    while function is not None and id(function) not in seen:
        seen.add(id(function))
        code, closure = getattr(function, "__code__", None), getattr(function, "__closure__", None)
        if code is not None and closure and variable in code.co_freevars:
            return closure[code.co_freevars.index(variable)]
        function = getattr(function, "__wrapped__", None)
    return None
