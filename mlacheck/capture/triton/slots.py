"""Triton's hook slots, checked at each counts flush (and at exit): each of `<triton>.knobs`' slots that mlacheck chained
onto (`compiles.py`'s HOOKS) must still reach mlacheck's hook, by holding it or a hook that calls it (one chained on
top: vLLM's jit_monitor keeps what the slot held in its closure). A slot the program replaced without chaining (its own
`knobs.compilation.listener = f`, as a logger or tritonparse sets it) hid every compile that passed it since: the
listener alone sees a direct `triton.compile()`. That is an `unseen` line (the run cannot pass), and mlacheck's hook
goes back on top, calling what the slot held.

Whether a hook calls mlacheck's is read from what it holds (`_reaches`), never by calling it.
"""

from __future__ import annotations

import gc
import threading
import types

from mlacheck import events
from mlacheck.capture.triton.compiles import HOOKS

MISSED = {
    "jit_cache_hook": "the launches' compiles that passed it since were not seen",
    "jit_post_compile_hook": "the times of the launches' compiles that passed it since were not seen",
    "listener": "a direct {module}.compile() that passed it since was not seen (it alone sees one)",
}
NOT_FOLLOWED = (types.ModuleType, type, types.CodeType, str, bytes, int, float, bool, type(None))


class Slots:
    """The part of `TritonCapture` that checks Triton's hook slots (`compiles.CompileHooks` chained onto them)."""

    def _check_hooks(self) -> None:
        """Each slot that no longer reaches mlacheck's hook: an `unseen` line, and mlacheck's hook back on top."""
        knobs = self.runtime.knobs
        for group, slot in HOOKS:
            owner, ours = getattr(knobs, group), self._ours[slot]
            holder = getattr(owner, slot)
            if holder is ours or _reaches(holder, ours):
                continue
            self.sink.write(
                events.unseen_event(
                    self.rule.module,
                    f"{self.rule.module}.knobs.{group}.{slot} was replaced without chaining onto mlacheck's hook (it "
                    f"held {_named(holder)}): {MISSED[slot].format(module=self.rule.module)}; mlacheck's hook is "
                    "back on top, calling it",
                )
            )
            self._chain(owner, slot)
            self._prev[slot] = _not_reentered(self._prev[slot])


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
