"""Kind "jit_dir": a JIT library whose cache key is computed in native code (DeepGEMM's C++ runtime), seen from the
Python side. The rule's `cache` is the object through which the dispatch functions reach the native library (a
module global they look up at each call, e.g. sgl-deep-gemm's `_C`); for the run it becomes a stand-in whose
operations are observed, those the dispatch functions call (their code's names), the rest passed through.

A variant's key is what Python passes: the operation's name (`kernel`), then each key field the operation takes, a
tensor as its dtype and shape. A compile is an entry that appears in the library's disk cache (the rule's `jit_dir`:
its root from the environment as the library reads it, or its default) during a call; the call's time is its
compile time, and what entry names made it is kept per variant (`compiled`). A call that compiled nothing made
nothing serving-path: its key is only dispatched (precompiled where a warm-up or capture frame called it). A
variant already dispatched on the serving path is counted on the hot path without reading the disk.

A cache root the process changed after the library's first use (the library keeps the root it read first), or one
that cannot be read, is an internal error: compiles may happen where capture does not look.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Collection
from time import perf_counter

from mlacheck.capture.hooks import CaptureHooks
from mlacheck.capture.install import Patches
from mlacheck.rulefiles.schema import Family

_getframe = sys._getframe


class Observed:
    """The native library as the dispatch functions see it for the run: observed operations as attributes, anything
    else the library's own."""

    def __init__(self, library: object, operations: dict[str, object]) -> None:
        self.__dict__.update(operations)
        self.__dict__["_library"] = library

    def __getattr__(self, name: str) -> object:
        return getattr(self.__dict__["_library"], name)


class JitDir:
    """The adapter of a native JIT library observed through its disk cache."""

    def __init__(self, family: Family, module: object, capture: CaptureHooks, patches: Patches) -> None:
        self.family, self.module, self.capture, self.patches = family, module, capture, patches
        self.places = family.jit_dir
        self._entry = re.compile(family.jit_dir.entry) if family.jit_dir else None
        self._fields = family.key_fields[1:]
        self._positions: dict[str, tuple[int, ...]] = {}  # operation -> the argument positions of its key fields
        self._names: dict[str, tuple[str, ...]] = {}  # operation -> the names of those fields
        self.compiled: dict[object, list[str]] = {}  # key -> the entries its calls made
        self._root: str | None = None  # the cache root of the library's first observed call

    @staticmethod
    def check(family: Family) -> str | None:
        if family.jit_dir is None:
            return "a jit_dir cache needs a [family.jit_dir] table (where the library's disk cache is)"
        if not family.key_fields or family.key_fields[0] != "kernel":
            return 'a jit_dir cache names the operation first: key_fields = ["kernel", ...]'
        return None

    def install(self) -> None:
        path, _, attribute = self.family.cache.rpartition(".")
        owner = self.patches.resolve(self.module, path)
        library = self.patches.attribute(owner, attribute)
        called = {
            name for dispatch in self.family.dispatch for name in _names_used(self.patches, dispatch, self.module)
        }
        operations = {}
        for name in sorted(called):
            operation = getattr(library, name, None)
            if callable(operation):
                operations[name] = self._observed(name, operation)
        if not operations:
            raise self.patches.stale(
                f"no dispatch function calls an operation of {self.family.module}.{self.family.cache}"
            )
        self.patches.replace(owner, attribute, Observed(library, operations))

    def preexisting(self) -> tuple[list, int]:
        """Native caches cannot be listed."""
        return [], 0

    def describe(self, key: tuple) -> tuple[dict[str, object], dict | None]:
        named = dict(zip(self._names[key[0]], key[1:]))
        return {"kernel": key[0], **{name: _text(named.get(name)) for name in self._fields}}, None

    def cached(self, keys: Collection) -> list:
        return list(keys)

    def forget(self) -> None:
        """Nothing of the adapter's own answers lookups past the capture's fast table."""

    # -- the observed operation -------------------------------------------------------------------------
    def _observed(self, name: str, operation: object) -> object:
        positions, names = _key_positions(operation, self._fields)
        self._positions[name], self._names[name] = positions, names
        fast, ticks, slow = self.capture.fast, self.capture.ticks, self._slow

        def observed(*args: object, **kwargs: object) -> object:
            if kwargs:
                return slow(name, operation, None, args, kwargs, _getframe(1))
            key = (name, *[_raw(args[i]) if i < len(args) else None for i in positions])
            entry = fast.get(key)
            if entry is None:
                return slow(name, operation, key, args, kwargs, _getframe(1))
            next(entry[0])
            next(ticks)
            return operation(*args)

        observed.__name__ = observed.__qualname__ = name
        return observed

    def _slow(self, name: str, operation, key: tuple | None, args: tuple, kwargs: dict, frame) -> object:
        """A call the fast table did not serve: inside a dispatch, time it and look for new entries on the disk."""
        capture = self.capture
        where = capture.where(frame)
        if where is None or where.dispatch_depth is None:
            return operation(*args, **kwargs)
        if key is None:
            key = self._bound_key(name, operation, args, kwargs)
        folder = self._folder()
        before = self._entries(folder)
        started = perf_counter()
        result = operation(*args, **kwargs)
        seconds = perf_counter() - started
        after = self._entries(folder)
        made = sorted(set(after[0]) - set(before[0]) | after[1] - before[1]) if before and after else []
        if made:
            self.compiled.setdefault(key, []).extend(made)
            capture.inserted(key, made, frame, seconds=seconds, origin="compile")
        elif where.phase is not None and key not in capture.vids:  # warmed: loaded, or built under another key
            capture.inserted(key, None, frame, seconds=None, origin="unknown")
        capture.looked_up(key, None, frame, where)
        return result

    def _bound_key(self, name: str, operation, args: tuple, kwargs: dict) -> tuple:
        arguments = dict(zip(_parameters(operation), args)) | kwargs
        return (name, *[_raw(arguments.get(field)) for field in self._names[name]])

    # -- the disk cache -----------------------------------------------------------------------------------
    def _folder(self) -> str:
        """The folder of entries the library writes now: the first root its variables name, else the default; a
        root changed since the first call is reported (the library reads it once)."""
        places = self.places
        value = next((os.environ[name] for name in places.env if os.environ.get(name)), None)
        root = os.path.expanduser(value.split(":")[0] if value else places.default)
        if self._root is None:
            self._root = root
        elif root != self._root:
            self.capture.internal_error(
                "jit_dir",
                f"the cache root changed from {self._root} to {root} after {self.family.module}'s first use; the "
                "library keeps the first, so later compiles are looked for in both",
            )
            self._root = root
        return os.path.join(root, places.entries) if places.entries else root

    def _entries(self, folder: str) -> tuple[list[str], set[str]] | None:
        """The entries in the folder and those of them committed; None (an internal error) where it cannot be read."""
        try:
            names = [name for name in os.listdir(folder) if self._entry.fullmatch(name)]
        except FileNotFoundError:
            return [], set()
        except OSError as exc:
            self.capture.internal_error("jit_dir", f"cannot read {folder}: {exc}; its compiles cannot be seen")
            return None
        marker = self.places.committed
        committed = {name for name in names if not marker or os.path.exists(os.path.join(folder, name, marker))}
        return names, committed


def _names_used(patches: Patches, dispatch: str, module: object) -> list[str]:
    """The attribute names a dispatch function's code uses (and that of the functions it wraps)."""
    owner, attribute = patches.function(dispatch, module)
    function = getattr(owner, attribute)
    code = getattr(getattr(function, "__wrapped__", function), "__code__", None)
    if code is None:
        raise patches.stale(f"{dispatch} is not a Python function")
    names, stack = set(), [code]
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(const for const in current.co_consts if hasattr(const, "co_names"))
    return sorted(names)


def _parameters(operation: object) -> list[str]:
    """An operation's parameter names: a torch operator's schema, else its signature."""
    schema = getattr(getattr(operation, "default", operation), "_schema", None)
    if schema is not None:
        return [argument.name for argument in schema.arguments]
    import inspect

    return list(inspect.signature(operation).parameters)


def _key_positions(operation: object, fields: list[str]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    parameters = _parameters(operation)
    chosen = [(index, name) for index, name in enumerate(parameters) if name in fields]
    return tuple(index for index, _ in chosen), tuple(name for _, name in chosen)


def _raw(value: object) -> object:
    """What a key holds of an argument: a tensor's dtype and shape, a list as a tuple, anything else itself."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return (value.dtype, shape)
    return tuple(value) if isinstance(value, list) else value


def _text(value: object) -> object:
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and hasattr(value[1], "__len__")
        and hasattr(value[0], "is_floating_point")
    ):
        return f"{str(value[0]).removeprefix('torch.')}{list(value[1])}"
    return list(value) if isinstance(value, tuple) else value
