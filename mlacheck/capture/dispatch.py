"""Dispatch accounting: the declared dispatch functions are wrapped to count calls and the calls that raised,
before or after their cache lookup (a dispatch that dies before its lookup checks nothing).

A shared tick counter is advanced by each call's entry and by each lookup, so a call that raised knows
whether a lookup happened in between, and so does a call that returned where the rule says every call looks up. Under `--dry` the wrapper also puts the family's stand-ins in
place for the call, keeps the named arguments on the host and zeroes the tensors it returns.

The wrapper of a dispatch that serves traffic has the original's own signature and forwards each argument
as the original takes it: a `*args, **kwargs` wrapper re-packs every call (about 0.5 us for a dozen keywords,
most of what capture would cost a dispatch), this one costs about a frame. It is generated from the signature,
as dataclasses generates its methods.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from mlacheck.capture.dry import DryStandIns, zero_results

if TYPE_CHECKING:
    from mlacheck.capture.family import FamilyCapture


def wrap_dispatch(original: Callable, name: str, capture: FamilyCapture, dry: DryStandIns | None) -> Callable:
    """A wrapper of one dispatch function that reports to `capture`. Where the rule says every call looks the
    cache up, a call that returns without a lookup is reported too (it ran a variant nothing checked)."""
    calls = capture.call_counter(name)
    ticks = capture.ticks

    def raised(error: BaseException, start: int, frame) -> None:
        capture.dispatch_raised(name, error, start, frame)

    def unlooked(frame) -> None:
        capture.dispatch_without_lookup(name, frame)

    checked = unlooked if capture.spec.every_call_looks_up else None
    if dry is None:
        dispatch = _forwarding(original, calls, ticks, raised, checked)
    else:
        signature = inspect.signature(original)

        def dry_call(*args: object, **kwargs: object) -> object:
            args, kwargs = _keep_on_host(signature, args, kwargs, dry)
            with dry.around_call():
                return zero_results(original(*args, **kwargs))

        dispatch = _counting(dry_call, calls, ticks, raised, checked)
    functools.update_wrapper(dispatch, original)
    return dispatch


def _counting(original: Callable, calls, ticks, raised, unlooked=None) -> Callable:
    """The counting wrapper of any callable: `*args, **kwargs`, re-packed on every call."""
    def dispatch(*args: object, **kwargs: object) -> object:
        start = next(ticks)
        next(calls)
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            raised(exc, start, sys._getframe(1))
            raise
        if unlooked is not None and next(ticks) == start + 1:
            unlooked(sys._getframe(1))
        return result

    return dispatch


def _forwarding(original: Callable, calls, ticks, raised, unlooked=None) -> Callable:
    """The counting wrapper, with the original's signature where it has a readable one."""
    try:
        parameters = list(inspect.signature(original).parameters.values())
    except (TypeError, ValueError):
        parameters = None
    if parameters is None or any(p.name.startswith("_mlacheck_") for p in parameters):
        return _counting(original, calls, ticks, raised, unlooked)
    header, forward, defaults = _parameter_lists(parameters)
    call = f"_mlacheck_original({', '.join(forward)})"
    source = (f"def dispatch({', '.join(header)}):\n"
              "    _mlacheck_start = next(_mlacheck_ticks)\n"
              "    next(_mlacheck_calls)\n"
              "    try:\n"
              + (f"        return {call}\n" if unlooked is None else f"        _mlacheck_result = {call}\n") +
              "    except BaseException as _mlacheck_error:\n"
              "        _mlacheck_raised(_mlacheck_error, _mlacheck_start, _mlacheck_getframe(1))\n"
              "        raise\n"
              + ("" if unlooked is None else
                 "    if next(_mlacheck_ticks) == _mlacheck_start + 1:\n"
                 "        _mlacheck_unlooked(_mlacheck_getframe(1))\n"
                 "    return _mlacheck_result\n"))
    namespace = {"__name__": __name__, "_mlacheck_ticks": ticks, "_mlacheck_calls": calls,
                 "_mlacheck_original": original, "_mlacheck_raised": raised, "_mlacheck_unlooked": unlooked,
                 "_mlacheck_getframe": sys._getframe, **defaults}
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
            index + 1 == len(parameters) or parameters[index + 1].kind is not parameter.POSITIONAL_ONLY)
        if last_positional_only:
            header.append("/")
    return header, forward, defaults


def _keep_on_host(signature: inspect.Signature, args: tuple, kwargs: dict, dry: DryStandIns) -> tuple[tuple, dict]:
    if not dry.host_arguments:
        return args, kwargs
    bound = signature.bind_partial(*args, **kwargs)
    for name in dry.host_arguments & bound.arguments.keys():
        bound.arguments[name] = dry.host_tensor(bound.arguments[name])
    return bound.args, bound.kwargs
