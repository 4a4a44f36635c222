"""A jit_dir library's calls that no dispatch observes, netted: every other operation of the native library (reached
through the stand-in by any name, or bound into a module of the library's package before capture installed) and an
observed operation called outside any dispatch function. Such a call keys no variant, but the library may build a
kernel in it (DeepGEMM's Mega MoE and scale-factor layout kernels): an entry that appears in the disk cache during
the call is an `unwatched_compile` of the family's net (MLA007 on the serving path), its phase as a compile net's
(`phase.decide`: a warm-up frame's, serving after the mark, else unknown), its arguments as what it was compiled for.

The first call of each argument key (the operation, the settings, then each argument as a jit_dir key holds it) is
bracketed by `compile_start` and `compile_end`; a key whose first call returned is served on the hot path without
looking at the disk (the library keeps in memory what it built or loaded), unless it holds an object by its identity
(`jit_keys.by_value`). An operation whose parameters cannot be read is looked at on every call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial, update_wrapper
from sys import _getframe
from time import perf_counter

from mlacheck.capture import hotpath, tensor_fields
from mlacheck.capture.caches.jit_keys import KINDS, by_value, call_key, raw, text
from mlacheck.capture.hooks import CaptureHooks
from mlacheck.keys import typed


class JitNet:
    """The netted calls of one jit_dir family in one process."""

    def __init__(
        self,
        capture: CaptureHooks,
        label: str,
        listing: Callable[[], set | None],
        state: list,
        built: Callable[[set | None, set | None], list[str]],
    ) -> None:
        """`label`: where the library is reached (module.cache); `listing()`: the disk cache's entries now (None where
        they cannot be read, an internal error already); `state`: the family's settings, as its keys hold them;
        `built(before, after)`: the entries a call built, by the listings around it, as paths (the family keeps them as
        its own)."""
        self.capture, self.label, self.listing, self.state, self.built = capture, label, listing, state, built
        self.fast = hotpath.FastTable()  # argument keys whose first call returned -> (counter, None)
        self._ticks = hotpath.ticks()

    def wrap(self, name: str, operation: object, parameters: list[str] | None) -> object:
        """The operation, netted: keyed on the hot path where its parameters are known, else looked at every call."""

        def slow(key: tuple | None, args: tuple, kwargs: dict, frame) -> object:
            return self.call(name, operation, parameters, key, args, kwargs, frame)

        if parameters is None:

            def netted(*args: object, **kwargs: object) -> object:
                return slow(None, args, kwargs, _getframe(1))

            return update_wrapper(netted, operation)  # (it shows what it stands for, as the hot path's do)
        positions = list(range(len(parameters)))
        tensor_fields.read_natively()
        return hotpath.observed_call(operation, name, self.state, positions, KINDS, self.fast, self._ticks, _no, slow)

    def call(self, name, operation, parameters, key: tuple | None, args: tuple, kwargs: dict, frame) -> object:
        """A call the fast table did not serve: timed, looking for new entries on the disk."""
        if key is None and parameters is not None:
            try:
                key = call_key(name, self.state[0], parameters, parameters, args, kwargs)
                if key in self.fast:
                    return operation(*args, **kwargs)
            except Exception:  # noqa: BLE001 - a call that cannot be keyed is looked at
                key = None
        before = self.listing()
        start = self.capture.unwatched_began(frame, f"{self.label}.{name}")
        started = perf_counter()
        try:
            result = operation(*args, **kwargs)
        except BaseException:
            self.capture.unwatched_ended(start, perf_counter() - started, "raised", dict)
            raise
        seconds = perf_counter() - started
        entries = self.built(before, self.listing())
        fields = partial(_fields, parameters, args, kwargs)  # (read only where it built a kernel)
        self.capture.unwatched_ended(start, seconds, "returned" if entries else "cached", fields, entries or None)
        if key is not None and by_value(key):
            self.fast[key] = (hotpath.counter(), None)
        return result


def _fields(parameters: list[str] | None, args: tuple, kwargs: dict) -> dict[str, object]:
    """What a netted compile was built for: each argument by its parameter's name, as a jit_dir key writes it."""
    names = parameters or [f"arg{index}" for index in range(1, len(args) + 1)]
    return {name: typed(text(raw(value))) for name, value in (dict(zip(names, args)) | kwargs).items()}


def _no() -> None:
    """The net counts nothing, so it never asks for a flush."""
