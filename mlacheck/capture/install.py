"""Putting capture in place and taking it out: every replacement is recorded with its undo, and undone in reverse.

A name a rule file gives that the installed library lacks is one `MlacheckError` line that names the rule's family
and says to re-check the rule against the installed version (`advice`).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable

from mlacheck.errors import MlacheckError


class Patches:
    """The replacements made for one family (or the agent's engine functions), each with its undo."""

    def __init__(
        self, label: str, advice: Callable[[], str] = lambda: "re-check the rule file", where: str = ""
    ) -> None:
        self.label, self.advice, self.where = label, advice, where
        self._undo: list[Callable[[], None]] = []

    def import_module(self, name: str, install_hint: str = "") -> object:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            raise MlacheckError(
                f"{self.label}: cannot import {name} ({exc})" + (f"; {install_hint}" if install_hint else "")
            ) from None

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

    def replace(self, owner: object, attribute: str, replacement: object) -> None:
        """`owner.attribute = replacement`, undone by putting back what was there."""
        original = getattr(owner, attribute)
        setattr(owner, attribute, replacement)
        self._undo.append(lambda: setattr(owner, attribute, original))

    def on_undo(self, action: Callable[[], None]) -> None:
        """Run `action` when the patches are undone (in reverse order of everything recorded)."""
        self._undo.append(action)

    def wrap_function(self, owner: object, attribute: str, wrapper: object) -> None:
        """Put `wrapper` in place of `owner.attribute`: a module function in its module and wherever its package
        re-exports it, a method (Class.method) on its class."""
        if inspect.ismodule(owner):
            self.replace_everywhere(owner.__name__.partition(".")[0], getattr(owner, attribute), wrapper)
        else:
            self.replace(owner, attribute, wrapper)

    def replace_everywhere(self, package: str, original: object, replacement: object) -> None:
        """Replace `original` in every loaded module of `package` that holds it (its module and the re-exports), and
        where the package put it in sys.modules itself (sgl-deep-gemm makes `import deep_gemm.fp8_gemm_nt` work so)."""
        for name, module in list(sys.modules.items()):
            if module is None or not (name == package or name.startswith(package + ".")):
                continue
            if module is original:
                self._replace_item(sys.modules, name, replacement)
                continue
            if not inspect.ismodule(module):
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
