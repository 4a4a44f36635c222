"""Putting capture in place and taking it out: every replacement is recorded with its undo, and undone in reverse.

A name a rule file gives that the installed library lacks is one `MlacheckError` line that names the rule's family
and says to re-check the rule against the installed version (`advice`). What was put in place is checked again
(`moved`): a program that rebinds a replaced attribute, reloads the module or imports it again goes past capture
from then on, and that is said.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable

from mlacheck.errors import MlacheckError


class AlreadyRecorded(MlacheckError):
    """The program's cache, where the rule's path leads, is already one this run records."""


class Patches:
    """The replacements made for one family (or the agent's engine functions), each with its undo."""

    def __init__(
        self, label: str, advice: Callable[[], str] = lambda: "re-check the rule file", where: str = ""
    ) -> None:
        self.label, self.advice, self.where = label, advice, where
        self._undo: list[Callable[[], None]] = []
        self._placed: dict[tuple[int, str], tuple] = {}  # each replaced attribute: (owner, name, value, is it ours)
        self._modules: dict[str, object] = {}  # the modules imported, as they were then
        self._moved: set[tuple[int, str]] = set()  # what `moved` said already

    def import_module(self, name: str, install_hint: Callable[[], str] | None = None) -> object:
        """The module `name`; one that cannot be imported is one line, with `install_hint()`'s advice where given."""
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            hint = install_hint() if install_hint is not None else ""
            raise MlacheckError(f"{self.label}: cannot import {name} ({exc})" + (f"; {hint}" if hint else "")) from None
        self._modules[name] = module  # the latest: a module executed again and followed is not "imported again"
        return module

    def attribute(self, owner: object, name: str) -> object:
        try:
            return getattr(owner, name)
        except AttributeError:
            where = self.where or getattr(owner, "__name__", type(owner).__name__)
            raise MlacheckError(
                f"{self.label}: {where} has no {name!r} where the rule looks: {self.advice()}"
            ) from None

    def resolve(self, root: object, path: str) -> object:
        """`root.a.b.c` for path "a.b.c"."""
        for part in filter(None, path.split(".")):
            root = self.attribute(root, part)
        return root

    def function(self, path: str, module: object | None = None) -> tuple[object, str]:
        """(owner, attribute) of a function named `MODULE:ATTRIBUTE.PATH`, or `ATTRIBUTE.PATH` in `module`."""
        where, _, name = path.rpartition(":")
        owner = self.import_module(where) if where else module
        path, _, attribute = name.rpartition(".")
        owner = self.resolve(owner, path)
        self.attribute(owner, attribute)
        return owner, attribute

    def stale(self, what: str) -> MlacheckError:
        """The error for a cache or function that is not what the rule says."""
        return MlacheckError(f"{self.label}: {what}: {self.advice()}")

    def replace(
        self, owner: object, attribute: str, replacement: object, ours: Callable[[object], bool] | None = None
    ) -> None:
        """`owner.attribute = replacement`, undone by putting back what was there (unless the program put something
        else there since: that stays). `ours`: what else at that place is still capture's (default: the replacement)."""
        original = getattr(owner, attribute)
        self.put(owner, attribute, replacement, ours)

        def restore() -> None:
            if self.holds(owner, attribute):
                setattr(owner, attribute, original)

        self._undo.append(restore)

    def put(self, owner: object, attribute: str, value: object, ours: Callable[[object], bool] | None = None) -> None:
        """`owner.attribute = value`, where capture keeps an attribute it replaced (`moved` checks it holds it)."""
        setattr(owner, attribute, value)
        self._placed[(id(owner), attribute)] = (owner, attribute, value, ours or (lambda current: current is value))

    def holds(self, owner: object, attribute: str) -> bool:
        """Whether `owner.attribute` still holds what capture put there (or another object of capture's)."""
        placed = self._placed.get((id(owner), attribute))
        return placed is not None and placed[3](getattr(owner, attribute, None))

    def moved(self) -> list[str]:
        """What went past capture since the last call: a module imported again (another module object is in
        sys.modules) and an attribute that no longer holds what capture put there (rebound, or the module reloaded);
        one line each, each said once."""
        lines = []
        for name, module in list(self._modules.items()):  # a copy: another thread may add to them
            if sys.modules.get(name, module) is not module and (id(module), "") not in self._moved:
                self._moved.add((id(module), ""))
                lines.append(f"{name} was imported again (a new module object): what went through it was not watched")
        for place, (owner, attribute, value, _) in list(self._placed.items()):
            if not self.holds(owner, attribute) and place not in self._moved:
                self._moved.add(place)
                where = getattr(owner, "__name__", type(owner).__name__)
                lines.append(
                    f"{where}.{attribute} no longer holds mlacheck's {_kind(value)} (the program rebound it or "
                    "reloaded its module): what went through the new one was not watched"
                )
        return lines

    def on_undo(self, action: Callable[[], None]) -> None:
        """Run `action` when the patches are undone (in reverse order of everything recorded)."""
        self._undo.append(action)

    def wrap_function(self, owner: object, attribute: str, wrapper: object) -> None:
        """Put `wrapper` in place of `owner.attribute`: a module function in its module and wherever its package
        re-exports it, a method (Class.method) on its class."""
        if isinstance(owner, types.ModuleType):
            self.replace_everywhere(owner.__name__.partition(".")[0], getattr(owner, attribute), wrapper)
        else:
            self.replace(owner, attribute, wrapper)

    def replace_everywhere(self, package: str, original: object, replacement: object) -> None:
        """Replace `original` in every loaded module of `package` that holds it (its module and the re-exports), and
        where the package put it in sys.modules itself (sgl-deep-gemm makes `import deep_gemm.fp8_gemm_nt` work so)."""
        inside = package + "."
        for name, module in list(sys.modules.items()):
            if module is None or not (name == package or name.startswith(inside)):
                continue
            if module is original:
                self._replace_item(sys.modules, name, replacement)
                continue
            if not isinstance(module, types.ModuleType):
                continue
            for attribute, value in list(vars(module).items()):
                if value is original:
                    self.replace(module, attribute, replacement)

    def _replace_item(self, mapping: dict, key: str, replacement: object) -> None:
        original = mapping[key]
        mapping[key] = replacement
        self._undo.append(lambda: mapping.__setitem__(key, original))

    def undo(self, safely: Callable[[str, Callable[[], object]], None]) -> None:
        """Undo everything, last first; an undo that fails is reported through `safely` and the rest go on."""
        while self._undo:
            safely("remove", self._undo.pop())
        self._placed.clear()
        self._modules.clear()


def _kind(value: object) -> str:
    return "cache" if isinstance(value, dict) else "wrapper"


def import_advice(distribution: str) -> str:
    """What to do about a family's module that cannot be imported: install its distribution; or, where that is
    installed, check the rule's module (a wrong name, or a dependency of the module that is missing: the error says
    which)."""
    import importlib.metadata  # slow to import; only a module that cannot be imported needs it

    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return f"install {distribution}"
    return f"{distribution} {version} is installed: check the rule file's module (or the dependency the error names)"


def unwrapped(function: object) -> object:
    """`inspect.unwrap(function)`, with inspect loaded only for a function that wraps another: a family's install, in
    every observed process that imports a watched library, loads no module it does not need."""
    if not hasattr(function, "__wrapped__"):
        return function
    import inspect

    return inspect.unwrap(function)
