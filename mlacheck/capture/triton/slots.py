"""Triton's hook slots. The compilation listener (the one hook a direct `triton.compile()` calls) is guarded: a data
descriptor (`Outermost`) takes the place of `listener` on the class of `<triton>.knobs.compilation`, so that whoever
reads the slot (Triton's compile first) gets mlacheck's listener on top, calling the program's after it. What the
program puts there (`knobs.compilation.listener = f`, or Triton's own `knobs.compilation.scope()` restoring its
`__dict__`) is the program's listener below mlacheck's: it runs once per compile, as it would, and nothing it holds
or drops can hide a compile (red-team 14, #5 and #6).

`runtime.jit_cache_hook` and `runtime.jit_post_compile_hook` are chained (`compiles.py`) and checked at each counts
flush (and at exit): each must still reach mlacheck's hook, by holding it or a hook that calls it (one chained on top:
vLLM's jit_monitor keeps what the slot held in its closure). A slot the program replaced without chaining hid the
launches' compiles that passed it since: an `unseen` line (the run cannot pass), and mlacheck's hook goes back on top,
calling what the slot held. Whether a hook calls mlacheck's is read from what it holds (`_reaches`), never by calling
it; a hook that holds it and does not call it still cannot hide a compile: the listener sees every compile, and one
that passed no mlacheck hook is an internal error (`compiles.py: _watch`). The listener's guard is checked at the
same times: a class or object of the program's in its place is an `unseen` line, and the guard goes back.
"""

from __future__ import annotations

import gc
import threading
import types
from collections.abc import Callable

from mlacheck import events
from mlacheck.capture.triton.compiles import HOOKS, LISTENER

MISSED = {
    "jit_cache_hook": "the launches' compiles that passed it since were not seen",
    "jit_post_compile_hook": "the times of the launches' compiles that passed it since were not seen",
}
NOT_FOLLOWED = (types.ModuleType, type, types.CodeType, str, bytes, int, float, bool, type(None))


class Slots:
    """The part of `TritonCapture` that checks Triton's hook slots (`compiles.CompileHooks` chained onto them)."""

    def _check_hooks(self) -> None:
        """Each slot that no longer reaches mlacheck's hook: an `unseen` line, and mlacheck's hook back on top."""
        knobs = self.runtime.knobs
        self._check_listener(getattr(knobs, LISTENER[0]))
        for group, slot in HOOKS:
            owner, ours = getattr(knobs, group), self._ours[slot]
            holder = getattr(owner, slot)
            if holder is ours or _reaches(holder, ours):
                continue
            self._unseen(
                f"{group}.{slot} was replaced without chaining onto mlacheck's hook (it held {_named(holder)}): "
                f"{MISSED[slot]}; mlacheck's hook is back on top, calling it"
            )
            self._chain(owner, slot)
            self._prev[slot] = _not_reentered(self._prev[slot])

    def _guard_listener(self, group: object) -> None:
        """mlacheck's listener on top of `group`'s (`<triton>.knobs.compilation`) from now on, whatever is put there;
        the class gets back its own attribute at remove (the object keeps the program's listener)."""
        name = LISTENER[1]
        self._guard = Outermost(name, self._compilation_listener, type(group).__dict__.get(name))
        self._patches.replace(type(group), name, self._guard)

    def _check_listener(self, group: object) -> None:
        """The listener's guard is still what the knobs' compilation group reads (the program put no other object or
        class there); if not, an `unseen` line, and the guard back on the group's class."""
        if _class_attribute(type(group), LISTENER[1]) is self._guard:
            return
        self._unseen(
            f"{LISTENER[0]}.{LISTENER[1]} is no longer mlacheck's guarded slot (the group is a "
            f"{type(group).__qualname__} of the program's): a direct {self.rule.module}.compile() since may not have "
            "been seen; mlacheck's listener is back on top"
        )
        self._guard_listener(group)

    def _unseen(self, what: str) -> None:
        self.sink.write(events.unseen_event(self.rule.module, f"{self.rule.module}.knobs.{what}"))


class Outermost:
    """A data descriptor in place of a hook slot on a knobs class: reading the slot gives mlacheck's hook on top
    (`OnTop`), calling what the program put there (the object's own `__dict__` keeps it, so that `scope()`, `copy()`
    and `reset()` handle it as they would); one of mlacheck's put back is the program's hook it stood for."""

    def __init__(self, name: str, hook: Callable, default: object) -> None:
        self.name, self.hook, self.default = name, hook, default
        self._top = OnTop(hook, default)

    def __get__(self, group: object, cls: type | None = None) -> object:
        if group is None:
            return self
        inner = group.__dict__.get(self.name, self.default)
        if self._top.inner is not inner:  # (one object per listener: two reads of the slot are the same object)
            self._top = OnTop(self.hook, inner)
        return self._top

    def __set__(self, group: object, value: object) -> None:
        group.__dict__[self.name] = value.inner if type(value) is OnTop else value

    def __delete__(self, group: object) -> None:
        if group.__dict__.pop(self.name, self) is self:
            raise AttributeError(self.name)


class OnTop:
    """What the guarded slot holds for whoever reads it: mlacheck's hook, called with the program's (`inner`)."""

    __slots__ = ("hook", "inner")

    def __init__(self, hook: Callable, inner: object) -> None:
        self.hook, self.inner = hook, inner

    def __call__(self, **kwargs: object) -> object:
        return self.hook(self.inner, kwargs)


def _class_attribute(cls: type, name: str) -> object:
    """`name` as the class's MRO defines it (what an instance's data descriptor lookup finds first)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _reaches(holder: object, target: object, depth: int = 8, most: int = 4096) -> bool:
    """Whether `holder` holds `target` a few steps deep: in its closure, its bound object and that object's
    attributes, a partial's function and arguments, what it wraps, the module globals a function's code names (gc's
    referents: nothing of the program runs). Modules, classes and a module's whole namespace are not followed
    (everything is reachable through them)."""
    seen: set[int] = set()
    layer = [holder]
    for _ in range(depth):
        following = []
        for thing in layer:
            if thing is target:
                return True
            if id(thing) in seen or isinstance(thing, NOT_FOLLOWED) or _globals(thing):
                continue
            seen.add(id(thing))
            following.extend(gc.get_referents(thing))
            if isinstance(thing, types.FunctionType):  # the module globals its code names (`previous = knobs...`)
                following.extend(thing.__globals__.get(name) for name in thing.__code__.co_names)
        if not following or len(seen) > most:
            return False
        layer = following[:most]  # (a hook's object holding a big list is not walked whole at each flush)
    return False


def _globals(thing: object) -> bool:
    """A module's namespace (a function's `__globals__`)."""
    return type(thing) is dict and "__builtins__" in thing and "__name__" in thing


def _named(holder: object) -> str:
    if holder is None:
        return "None"
    name = getattr(holder, "__qualname__", None) or type(holder).__qualname__
    return f"{getattr(holder, '__module__', None) or '?'}.{name}"


def _not_reentered(hook: object) -> object:
    """What the slot held, called by mlacheck's hook back on top: a hook that reaches mlacheck's one way `_reaches`
    does not read (a module global) would call it again; that inner call goes no further (no endless round)."""
    if hook is None:
        return None
    inside = threading.local()

    def once(*args: object, **kwargs: object) -> object:
        if getattr(inside, "calling", False):
            return None
        inside.calling = True
        try:
            return hook(*args, **kwargs)
        finally:
            inside.calling = False

    once.__wrapped__ = hook
    return once
