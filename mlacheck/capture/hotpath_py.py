"""The capture's hot path in pure Python: what runs on every dispatch of a variant already seen in serving.

`_hotpath.c` is the same objects compiled, without the Python frames (one frame costs 0.3-1 us inside a
dispatch); this module is what runs where the build had no C compiler, and the contract both keep:

- `counter(start=0)`: what the capture counts with, stepped by `next()`; `hotpath.count_of` reads one without
  stepping it (the compiled one steps without making an int).
- `ticks()`: a count of each thread's own, stepped by `next()` (each thread counts from 0): what a dispatch
  call's entry and a lookup step, so that a call is judged by what happened in its own thread.
- `forwarder(original, calls, ticks, raised, unlooked=None)`: a dispatch function's wrapper. Each call steps
  the ticks (keeping the value as `start`) and `calls`, then calls the original as it was called. A call
  that raises reports `raised(error, start, caller's frame)` and re-raises; with `unlooked`, a call that
  returns where its thread's ticks moved only by its own entry reports `unlooked(caller's frame)`. It pickles and
  copies by reference, as the function does. (A call the original's signature refuses: the generated
  wrapper refuses it before counting it; the compiled one lets the original refuse it, a call that raised
  before its lookup.)
- `launcher(counter, kernel, ticks, flush)`: what a functools family's front holds for a variant seen in
  serving. Each call steps the variant's counter (calling `flush()` every FLUSH_EVERY + 1 steps) and the
  ticks, then calls the kernel.
- A launcher and an observed call show what they stand for (`functools.update_wrapper`): `__wrapped__` is the
  kernel or operation, and its name, documentation and attributes are read through them (the compiled ones look each
  up on it when read; here, as they were when the stand-in was made).
- `observed_call(operation, head, state, positions, kinds, fast, ticks, flush, slow)`: what a native operation
  becomes where its key is what Python passes it (a `jit_dir` family's operations). A call with positional arguments
  only is keyed `(head, state[0], *fields)`, a field for each position in `positions`: the argument there (None where
  the call has fewer), an exact None, bool, int, float or str as itself, an exact list as the tuple of its items at this
  call (the compiled one: where every item is such a scalar), any other value by `kinds[type(value)]`: None, itself; a
  marker, `(marker, value.dtype, value.shape, layout(value))` (read in that order: shape, dtype, then `stride()`),
  itself where its shape is None. A key in `fast` is served as a launcher's call is (its counter steps, calling
  `flush()` every FLUSH_EVERY + 1 steps, then the ticks) and the operation is called; any other call goes to `slow(key,
  args, kwargs, caller's frame)`, key None where the call has keywords, an argument's type is not in `kinds` or reading
  one raised (an Exception; anything else propagates) (the compiled one: or a `stride()` that did not give a tuple of
  ints). (The compiled one reads each argument once and compares the fields with the keys it served lately (`memo` of
  them, 64 unless told, each in one of two slots the fields' hash names), a shape item by item, before it builds and
  hashes a key; it forgets them whenever the fast table changes. An exact torch tensor's fields it reads below Python
  where `tensor_fields` verified that reading them there gives what Python reads; where a type's `shape` and `dtype`
  are getset descriptors and it looks attributes up as object does, it calls their getters straight, as
  PyObject_GetAttr would, while the type's version tag says it is unchanged. It does not bind as a method.)
- `FastTable()`: the capture's table of variants seen in serving, key -> (counter, value), a mapping with
  `get`, `pop`, `clear`, `[]`, `in` and `len` (a dict here; the compiled one also remembers the few keys it
  served last and finds a key whose fields are the same objects as one of those without hashing it, and it
  forgets them on every change).
- `GetitemDict`, `ContainsDict`, `GetDict`: the dict a dict family's cache becomes, whose lookup (`cache[key]`,
  `key in cache`, or `cache.get(key, default)`: a Triton kernel's cache) is served from `_fast` (a `FastTable`):
  the counter steps as a launcher's does (asking `_capture.maybe_flush()`), then the ticks; a key not in `_fast`
  goes to `self._missed(key, frame)` (for `get`, None from it is a miss: `default`).
  (That step is written out in each of them rather than shared: a helper would be a frame.)
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import inspect

FLUSH_EVERY = 1023  # a variant's counter asks for a (time-bounded) counts flush every 1024 dispatches

_getframe = sys._getframe
counter = itertools.count  # C-level, so no count is lost between threads
FastTable = dict


class ticks(threading.local):
    """A count of each thread's own (each thread's first `next()` gives 0)."""

    def __init__(self) -> None:
        self.count = itertools.count()

    def __iter__(self) -> ticks:
        return self

    def __next__(self) -> int:
        return next(self.count)


def counting(original: Callable, calls, ticks, raised, unlooked=None) -> Callable:
    """The forwarder of any callable: `*args, **kwargs`, re-packed on every call."""

    def dispatch(*args: object, **kwargs: object) -> object:
        start = next(ticks)
        next(calls)
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            raised(exc, start, _getframe(1))
            raise
        if unlooked is not None and next(ticks) == start + 1:
            unlooked(_getframe(1))
        return result

    return dispatch


def forwarder(original: Callable, calls, ticks, raised, unlooked=None) -> Callable:
    """The forwarder, with the original's signature where it has a readable one: a `*args, **kwargs` wrapper
    re-packs every call (about 0.5 us for a dozen keywords), this one costs a frame. It is generated from the
    signature, as dataclasses generates its methods."""
    import inspect  # here: the compiled hot path, where it is built, needs none

    try:
        parameters = list(inspect.signature(original).parameters.values())
    except (TypeError, ValueError):
        parameters = None
    if parameters is None or any(p.name.startswith("_mlacheck_") for p in parameters):
        return counting(original, calls, ticks, raised, unlooked)
    header, forward, defaults = _parameter_lists(parameters)
    call = f"_mlacheck_original({', '.join(forward)})"
    source = (
        f"def dispatch({', '.join(header)}):\n"
        "    _mlacheck_start = _mlacheck_next(_mlacheck_ticks)\n"
        "    _mlacheck_next(_mlacheck_calls)\n"
        "    try:\n"
        + (f"        return {call}\n" if unlooked is None else f"        _mlacheck_result = {call}\n")
        + "    except _mlacheck_BaseException as _mlacheck_error:\n"
        "        _mlacheck_raised(_mlacheck_error, _mlacheck_start, _mlacheck_getframe(1))\n"
        "        raise\n"
        + (
            ""
            if unlooked is None
            else "    if _mlacheck_next(_mlacheck_ticks) == _mlacheck_start + 1:\n"
            "        _mlacheck_unlooked(_mlacheck_getframe(1))\n"
            "    return _mlacheck_result\n"
        )
    )
    namespace = {
        "__name__": __name__,
        "_mlacheck_ticks": ticks,
        "_mlacheck_calls": calls,
        "_mlacheck_original": original,
        "_mlacheck_raised": raised,
        "_mlacheck_unlooked": unlooked,
        "_mlacheck_getframe": sys._getframe,
        "_mlacheck_next": next,  # the body names nothing a parameter could shadow (`next`, `BaseException`)
        "_mlacheck_BaseException": BaseException,
        **defaults,
    }
    exec(compile(source, f"<mlacheck wrapper of {getattr(original, '__qualname__', 'a dispatch')}>", "exec"), namespace)
    return namespace["dispatch"]


def _parameter_lists(parameters: list[inspect.Parameter]) -> tuple[list[str], list[str], dict[str, object]]:
    """The wrapper's parameter list, the call that forwards them as the original takes them, and the defaults
    (the original's own default objects)."""
    header, forward, defaults = [], [], {}
    for index, parameter in enumerate(parameters):
        text = parameter.name
        if parameter.default is not parameter.empty:
            defaults[f"_mlacheck_default_{index}"] = parameter.default
            text += f"=_mlacheck_default_{index}"
        kind = parameter.kind
        if kind is parameter.VAR_POSITIONAL:
            text, argument = f"*{parameter.name}", f"*{parameter.name}"
        elif kind is parameter.VAR_KEYWORD:
            text, argument = f"**{parameter.name}", f"**{parameter.name}"
        elif kind is parameter.KEYWORD_ONLY:
            argument = f"{parameter.name}={parameter.name}"
            if not any(p.kind in (p.VAR_POSITIONAL, p.KEYWORD_ONLY) for p in parameters[:index]):
                header.append("*")
        else:
            argument = parameter.name
        header.append(text)
        forward.append(argument)
        last_positional_only = kind is parameter.POSITIONAL_ONLY and (
            index + 1 == len(parameters) or parameters[index + 1].kind is not parameter.POSITIONAL_ONLY
        )
        if last_positional_only:
            header.append("/")
    return header, forward, defaults


def launcher(counter, kernel: Callable, ticks, flush: Callable[[], None]) -> Callable:
    def launch(*args: object, **kwargs: object) -> object:
        if next(counter) & FLUSH_EVERY == FLUSH_EVERY:
            flush()
        next(ticks)
        return kernel(*args, **kwargs)

    return functools.update_wrapper(launch, kernel)


_ITSELF = frozenset({type(None), bool, int, float, str})


def layout(value: object) -> int | None:
    """A tensor's layout as a key holds it: the dimension of stride 1 nearest its end (-1: the last; a native library
    may pick its kernel by which dimension is contiguous), 0 where none is, None where its type has no `stride`."""
    if not any("stride" in vars(klass) for klass in type(value).__mro__):
        return None
    strides = value.stride()
    return next((at - len(strides) for at in range(len(strides) - 1, -1, -1) if strides[at] == 1), 0)


def observed_call(operation: Callable, head, state: list, positions, kinds: dict, fast, ticks, flush, slow) -> Callable:
    positions = tuple(positions)

    def observe(*args: object, **kwargs: object) -> object:
        if kwargs:
            return slow(None, args, kwargs, _getframe(1))
        try:
            fields, count = [head, state[0]], len(args)
            for index in positions:
                value = args[index] if index < count else None
                cls = type(value)
                if cls is list:  # as the slow path keys it: the items, at this call
                    fields.append(tuple(value))
                    continue
                kind = None if cls in _ITSELF else kinds[cls]
                if kind is None:
                    fields.append(value)
                else:
                    shape = value.shape
                    fields.append(value if shape is None else (kind, value.dtype, shape, layout(value)))
            key = tuple(fields)
            entry = fast.get(key)
        except Exception:  # noqa: BLE001 - the slow path keys it, or says why it cannot
            return slow(None, args, kwargs, _getframe(1))
        if entry is None:
            return slow(key, args, kwargs, _getframe(1))
        if next(entry[0]) & FLUSH_EVERY == FLUSH_EVERY:
            flush()
        next(ticks)
        return operation(*args)

    return functools.update_wrapper(observe, operation)


class GetitemDict(dict):
    __slots__ = ("_capture", "_fast", "_ticks")

    def __getitem__(self, key: object) -> object:
        entry = self._fast.get(key)
        if entry is None:
            return self._missed(key, _getframe(1))
        if next(entry[0]) & FLUSH_EVERY == FLUSH_EVERY:
            self._capture.maybe_flush()
        next(self._ticks)
        return entry[1]


class ContainsDict(dict):
    __slots__ = ("_capture", "_fast", "_ticks")

    def __contains__(self, key: object) -> bool:
        entry = self._fast.get(key)
        if entry is None:
            return self._missed(key, _getframe(1))
        if next(entry[0]) & FLUSH_EVERY == FLUSH_EVERY:
            self._capture.maybe_flush()
        next(self._ticks)
        return True


class GetDict(dict):
    __slots__ = ("_capture", "_fast", "_ticks")

    def get(self, key: object, default: object = None) -> object:
        entry = self._fast.get(key)
        if entry is None:
            found = self._missed(key, _getframe(1))
            return default if found is None else found
        if next(entry[0]) & FLUSH_EVERY == FLUSH_EVERY:
            self._capture.maybe_flush()
        next(self._ticks)
        return entry[1]
