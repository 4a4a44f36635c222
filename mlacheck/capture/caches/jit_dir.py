"""Kind "jit_dir": a JIT library whose cache key is computed in native code (DeepGEMM's C++ runtime), seen from the
Python side. The rule's `cache` is the object through which the dispatch functions reach the native library (a
module global they look up at each call, e.g. sgl-deep-gemm's `_C`); for the run it becomes a stand-in whose
operations are observed, those the dispatch functions call (the names and texts their code uses), the rest passed
through.

A variant's key is what Python passes: the operation's name (`kernel`), the process-wide settings the rule names
(`jit_dir.settings`, e.g. num_sms, as last set through the library's setters), then each argument the key fields name, a
tensor as its dtype, shape and layout (`hotpath_py.layout`: which dimension has stride 1). A compile is an entry that
appears in the library's disk cache (the rule's `jit_dir`: its root from the environment as the library reads it, or its
default) during a dispatch call; the call's time is its compile time, and the first call of each key in a process is
bracketed by `compile_start` and `compile_end` (a process that dies in it leaves it behind). The first call of a key
that built nothing entered the cache all the same: `borrowed` where its kernel can only be one this process built for
another key (its calls built at least one entry, and the cache never held one from outside them); else (loaded from a
disk cache that held other processes' or runs' entries, or built for another key) in a warm-up or capture frame, in
that phase, and elsewhere `unknown`: warm-up where serving start comes later, else the run cannot pass unless every
such entry was made by a compile of the run (`analysis.borrowed.settle_borrowed`: each record names the entries its
compile made, and one that built nothing the foreign entries found since the last). A variant
already dispatched on the serving path is counted on the hot path without looking at the disk; any other call is
watched by the folder's change time and link count (a renamed-in entry folder changes both), listed only when they
move.

A cache root the process changed after the library's first use (the library keeps the root it read first), or one
that cannot be read, is an internal error: compiles may happen where capture does not look. So is the first call of an
operation with an argument that no key field names: the key cannot vouch that a hit ran a kernel already built.

The library's other operations, and an observed one called outside any dispatch function, are netted (`jit_net`): a
kernel built in such a call is an unwatched compile. The stand-in replaces the library, and its operations replace
theirs, wherever a module of the library's package bound them before capture installed.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import types
from collections.abc import Callable, Collection
from time import perf_counter

from mlacheck.capture import hotpath, phase, tensor_fields
from mlacheck.capture.caches.jit_keys import KINDS, call_key, raw, text
from mlacheck.capture.caches.jit_net import JitNet
from mlacheck.capture.hooks import CaptureHooks
from mlacheck.capture.hotpath import FLUSH_EVERY
from mlacheck.capture.install import Patches
from mlacheck.rulefiles.plain import Family

STARTUP = (phase.WARMUP, phase.CAPTURE)


class Observed:
    """The native library as the program sees it for the run: observed operations as attributes, its other operations
    netted (`jit_net`, each made at its first use), anything else the library's own."""

    def __init__(self, library: object, operations: dict[str, object], netted: Callable[[str, object], object]) -> None:
        self.__dict__.update(operations)
        self.__dict__["_library"] = library
        self.__dict__["_netted"] = netted

    def __getattr__(self, name: str) -> object:
        value = getattr(self.__dict__["_library"], name)
        if name.startswith("__") or not _operation(value):
            return value
        netted = self.__dict__[name] = self.__dict__["_netted"](name, value)
        return netted


class JitDir:
    """The adapter of a native JIT library observed through its disk cache."""

    def __init__(self, family: Family, module: object, capture: CaptureHooks, patches: Patches) -> None:
        self.family, self.module, self.capture, self.patches = family, module, capture, patches
        self.places = family.jit_dir
        self._entry = re.compile(self.places.entry) if self.places else None
        self._settings = list(self.places.settings) if self.places else []
        self._state = [(None,) * len(self._settings)]  # [the settings' last values], as the key holds them
        self._fields = [name for name in family.key_fields[1:] if name not in self._settings]
        self._names: dict[str, tuple[str, ...]] = {}  # operation -> the names of its key fields, in argument order
        self._unkeyed: dict[str, list[str]] = {}  # operation -> its arguments the key does not hold
        self._called: set = set()  # keys called inside a dispatch (the first call of each may compile)
        self._own: set[str] = set()  # the entries this process's observed calls built
        self._foreign: set[str] = set()  # the entries it held that none built (an earlier run's, another process's)
        self._found: set[str] = set()  # of those, the ones found since the last record (it names them)
        self._root: str | None = None  # the cache root of the first observed call
        self._listing: tuple[tuple[int, int], set[str]] | None = None  # ((change time, links), entries) last listed
        self._reported: set[str] = set()

    @staticmethod
    def check(family: Family) -> str | None:
        if family.jit_dir is None:
            return "a jit_dir cache needs a [family.jit_dir] table (where the library's disk cache is)"
        settings = list(family.jit_dir.settings)
        if family.key_fields[: 1 + len(settings)] != ["kernel", *settings]:
            return f"a jit_dir cache's key_fields start with kernel, then its settings: {['kernel', *settings]}"
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
        for index, setter in enumerate(self.places.settings.values()):
            setter_owner, setter_attribute = self.patches.function(setter, self.module)
            function = getattr(setter_owner, setter_attribute)
            self.patches.wrap_function(setter_owner, setter_attribute, self._setting(index, function))
        label = f"{self.family.module}.{self.family.cache}"
        self._net = JitNet(self.capture, label, self._entries_now, self._state, self._built_paths)
        stand_in = Observed(library, operations, self._netted)
        self.patches.replace(owner, attribute, stand_in)
        self._bound_at_import(library, stand_in)

    def _bound_at_import(self, library: object, stand_in: Observed) -> None:
        """What the library's package bound before capture installed, pointed at the stand-in: the library itself
        (sgl-deep-gemm's deep_gemm.mega holds `_C`) and its operations (vLLM's `_C` module binds the layout ones)."""
        name = self.module.__name__
        package = name if hasattr(self.module, "__path__") or "." not in name else name.rpartition(".")[0]
        self.patches.replace_everywhere(package, library, stand_in)
        bound: dict[tuple[bool, int], str] = {}  # the identity of each operation -> its name
        for attribute in dir(library):
            try:
                value = None if attribute.startswith("_") else getattr(library, attribute, None)
            except Exception:  # noqa: BLE001 - an attribute that cannot be read binds nothing
                continue
            if _operation(value):
                bound[_identity(value, library)] = attribute
        for name, module in list(sys.modules.items()):
            if not isinstance(module, types.ModuleType) or not (name == package or name.startswith(package + ".")):
                continue
            for attribute, value in list(vars(module).items()):
                operation = bound.get(_identity(value, library))
                if operation is not None:
                    self.patches.replace(module, attribute, getattr(stand_in, operation))

    def preexisting(self) -> tuple[list, int]:
        """Native caches cannot be listed."""
        return [], 0

    def describe(self, key: tuple) -> tuple[dict[str, object], dict | None]:
        name, settings, raws = key[0], key[1], key[2:]
        named = dict(zip(self._names[name], raws))
        fields = {f: text(named.get(f)) for f in self._fields}
        passed = {f: text(named[f]) for f in self._settings if f in named}  # the operation's own, for this call
        return {"kernel": name, **{f: text(v) for f, v in zip(self._settings, settings)}, **passed, **fields}, None

    def cached(self, keys: Collection) -> list:
        return list(keys)

    def forget(self) -> None:
        """Nothing of the adapter's own answers lookups past the capture's fast table."""

    def superseded(self) -> None:
        """Nothing to give back: the stand-in holds no entries of its own."""

    def audit(self) -> list[str]:
        """Nothing to audit from Python: a call past the stand-in is native, and an entry that appears in the disk
        cache outside an observed call may be another process's (ranks share the folder), not a compile unseen here.
        A stand-in the program replaced is what `Patches.moved` reports."""
        return []

    # -- the observed operation and settings ----------------------------------------------------------------
    def _observed(self, name: str, operation: object) -> object:
        """The operation as the run sees it: a call keyed on the hot path (`hotpath.observed_call`), else here."""
        parameters = _parameters(operation)
        keyed = {*self._fields, *self._settings}  # an argument named as a setting is keyed too (it picks the kernel)
        chosen = [(index, parameter) for index, parameter in enumerate(parameters) if parameter in keyed]
        self._names[name] = tuple(parameter for _, parameter in chosen)
        if unkeyed := [parameter for parameter in parameters if parameter not in keyed]:
            self._unkeyed[name] = unkeyed
        capture = self.capture

        def slow(key: tuple | None, args: tuple, kwargs: dict, frame) -> object:
            return self._slow(name, operation, parameters, key, args, kwargs, frame)

        tensor_fields.read_natively()
        return hotpath.observed_call(
            operation,
            name,
            self._state,
            [index for index, _ in chosen],
            KINDS,
            capture.fast,
            capture.ticks,
            capture.maybe_flush,
            slow,
        )

    def _setting(self, index: int, setter: object) -> object:
        state = self._state

        def set_value(*args: object, **kwargs: object) -> object:
            result = setter(*args, **kwargs)
            values = [*args, *kwargs.values()]
            settings = list(state[0])
            settings[index] = raw(values[0] if len(values) == 1 else tuple(values))  # hashable, as keys need
            state[0] = tuple(settings)
            return result

        set_value.__wrapped__ = setter
        return set_value

    def _slow(self, name, operation, parameters, key: tuple | None, args: tuple, kwargs: dict, frame) -> object:
        """A call the hot path did not serve: keyed here where it could not be (keywords, a list, a type not seen
        yet), served from the fast table where it is there, else, inside a dispatch, timed, looking for new entries
        on the disk. An operation with arguments the key does not hold is reported at its first call: the library may
        pick (and compile) another kernel by one of them where the key says the variant was served."""
        capture = self.capture
        if name in self._unkeyed:
            self._report(
                f"unkeyed {name}",
                f"{self.family.module}.{self.family.cache}.{name} takes {', '.join(self._unkeyed[name])}, which "
                f"{self.family.name}'s key_fields do not hold: a kernel they choose could compile unseen",
            )
        if key is None:
            try:
                key = call_key(name, self._state[0], parameters, self._names[name], args, kwargs)
                entry = capture.fast.get(key)
            except Exception as exc:  # noqa: BLE001 - capture never raises into the program
                self._report("key", f"cannot key a call of {name}: {type(exc).__name__}: {exc}")
                return operation(*args, **kwargs)
            if entry is not None:
                if next(entry[0]) & FLUSH_EVERY == FLUSH_EVERY:
                    capture.maybe_flush()
                next(capture.ticks)
                return operation(*args, **kwargs)
        where = capture.where(frame)
        if where is None:
            return operation(*args, **kwargs)
        if where.dispatch_depth is None:  # called from elsewhere: netted as the library's other operations are
            return self._net.call(name, operation, parameters, None, args, kwargs, frame)
        folder = self._folder()
        before = self._entries(folder)
        first = key not in self._called
        start = capture.compile_began(frame, key) if first else None  # a first call may compile
        self._called.add(key)
        started = perf_counter()
        try:
            result = operation(*args, **kwargs)
        except BaseException:
            capture.compile_ended(start, perf_counter() - started, "raised")
            raise
        seconds = perf_counter() - started
        made = _paths(folder, self._built(before, self._entries(folder)))
        capture.compile_ended(start, seconds, "returned" if made else "cached")
        if made:
            capture.inserted(key, made, frame, seconds=seconds, origin="compile", entries=made, start=start)
        elif first:
            phase_now, found = self._built_nothing(where), _paths(folder, self._found)
            self._found.clear()
            capture.inserted(key, None, frame, seconds=None, origin="unknown", phase=phase_now, foreign=found or None)
        capture.looked_up(key, None, frame, where)
        return result

    def _built(self, before: set[str] | None, after: set[str] | None) -> set[str]:
        """The entries an observed call built (none where the folder could not be read): this process's own; an entry
        listed before it that no observed call built came from outside the process."""
        if before is None or after is None:
            return set()
        if found := before - self._own - self._foreign:
            self._foreign |= found
            self._found |= found
        made = after - before
        self._own |= made
        return made

    def _built_paths(self, before: set[str] | None, after: set[str] | None) -> list[str]:
        """`_built`, each entry as its path (what a record names)."""
        return _paths(self._folder(), self._built(before, after))

    def _built_nothing(self, where) -> str:
        """The phase a first call that built nothing entered the cache in (the module docstring says why)."""
        if self._own and not self._foreign:
            return phase.BORROWED
        now = self.capture.phase_at(where)
        return now if now in STARTUP else phase.UNKNOWN

    def _netted(self, name: str, operation: object) -> object:
        try:
            parameters = _parameters(operation)
        except (TypeError, ValueError):  # no schema and no signature: looked at every call
            parameters = None
        return self._net.wrap(name, operation, parameters)

    # -- the disk cache -----------------------------------------------------------------------------------
    def _entries_now(self) -> set[str] | None:
        return self._entries(self._folder())

    def _folder(self) -> str:
        """The folder of entries the library writes now: the first root its variables name, else the default; a
        root changed since the first call is reported (the library reads it once)."""
        places = self.places
        value = next((os.environ[name] for name in places.env if os.environ.get(name)), None)
        root = os.path.expanduser(value.split(":")[0] if value else places.default)
        if self._root is None:
            self._root = root
        elif root != self._root:
            self._report(
                "moved",
                f"the cache root changed from {self._root} to {root} after {self.family.module}'s first use; the "
                "library keeps the one it read first, where capture no longer looks",
            )
        return os.path.join(root, places.entries) if places.entries else root

    def _entries(self, folder: str) -> set[str] | None:
        """The folder's entries (listed again only where its change time or link count moved); None, an internal
        error, where it cannot be read."""
        try:
            status = os.stat(folder)
        except FileNotFoundError:
            return set()
        except OSError as exc:
            return self._unreadable(folder, exc)
        stamp = (status.st_mtime_ns, status.st_nlink)
        if self._listing is not None and self._listing[0] == stamp:
            return self._listing[1]
        try:
            names = {name for name in os.listdir(folder) if self._entry.fullmatch(name)}
        except OSError as exc:
            return self._unreadable(folder, exc)
        self._listing = (stamp, names)
        return names

    def _unreadable(self, folder: str, error: OSError) -> None:
        self._report("unreadable", f"cannot read {folder}: {error}; the compiles written there cannot be seen")
        return None

    def _report(self, what: str, message: str) -> None:
        if what not in self._reported:
            self._reported.add(what)
            self.capture.internal_error("jit_dir", message)


def _paths(folder: str, names: set[str]) -> list[str]:
    """Entries of the cache folder as their paths, in order (what a record names)."""
    return [os.path.join(folder, name) for name in sorted(names)]


def _names_used(patches: Patches, dispatch: str, module: object) -> list[str]:
    """The attribute names a dispatch function's code uses (its nested code too), and its text constants (an
    operation a helper reaches by name: vLLM's vendored DeepGEMM, `_bf16_gemm('bf16_gemm_nt', ...)`)."""
    owner, attribute = patches.function(dispatch, module)
    function = inspect.unwrap(getattr(owner, attribute))
    code = getattr(function, "__code__", None)
    if code is None:
        raise patches.stale(f"{dispatch} is not a Python function")
    names, stack = set(), [code]
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        names.update(const for const in current.co_consts if isinstance(const, str) and const.isidentifier())
        stack.extend(const for const in current.co_consts if hasattr(const, "co_names"))
    return sorted(names)


def _parameters(operation: object) -> list[str]:
    """An operation's parameter names: a torch operator's schema, else its signature."""
    schema = getattr(getattr(operation, "default", operation), "_schema", None)
    if schema is not None:
        return [argument.name for argument in schema.arguments]
    return list(inspect.signature(operation).parameters)


def _operation(value: object) -> bool:
    """Whether an attribute of the library is one of its operations (callable, not a class)."""
    return callable(value) and not isinstance(value, type)


def _identity(value: object, library: object) -> tuple[bool, int]:
    """What tells an operation apart: a method bound to the library by its function (each lookup binds anew),
    anything else by itself."""
    if isinstance(value, types.MethodType) and value.__self__ is library:
        return True, id(value.__func__)
    return False, id(value)
