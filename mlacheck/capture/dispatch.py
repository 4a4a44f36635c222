"""Dispatch accounting: the declared dispatch functions are wrapped to count calls and the calls that raised,
before or after their cache lookup (a dispatch that dies before its lookup checks nothing).

A shared tick counter is advanced by each call's entry and by each lookup, so a call that raised knows
whether a lookup happened in between. Under `--dry` the wrapper also puts the family's stand-ins in
place for the call, keeps the named arguments on the host and zeroes the tensors it returns.
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
    """A wrapper of one dispatch function that reports to `capture`."""
    calls = capture.call_counter(name)
    ticks = capture.ticks

    if dry is None:
        def dispatch(*args: object, **kwargs: object) -> object:
            start = next(ticks)
            next(calls)
            try:
                return original(*args, **kwargs)
            except BaseException as exc:
                capture.dispatch_raised(name, exc, start, sys._getframe(1))
                raise
    else:
        signature = inspect.signature(original)

        def dispatch(*args: object, **kwargs: object) -> object:
            start = next(ticks)
            next(calls)
            try:
                args, kwargs = _keep_on_host(signature, args, kwargs, dry)
                with dry.around_call():
                    return zero_results(original(*args, **kwargs))
            except BaseException as exc:
                capture.dispatch_raised(name, exc, start, sys._getframe(1))
                raise

    functools.update_wrapper(dispatch, original)
    return dispatch


def _keep_on_host(signature: inspect.Signature, args: tuple, kwargs: dict, dry: DryStandIns) -> tuple[tuple, dict]:
    if not dry.host_arguments:
        return args, kwargs
    bound = signature.bind_partial(*args, **kwargs)
    for name in dry.host_arguments & bound.arguments.keys():
        bound.arguments[name] = dry.host_tensor(bound.arguments[name])
    return bound.args, bound.kwargs
