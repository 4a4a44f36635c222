"""Dispatch accounting: the declared dispatch functions are wrapped to count calls and the calls that raised,
before or after their cache lookup (a dispatch that dies before its lookup checks nothing).

A tick count of each thread's own is advanced by each call's entry and by each lookup, so a call that raised
knows whether a lookup happened in its thread in between, and so does a call that returned where the rule says
every call looks up (another thread's lookup meanwhile is not its lookup). Under `--dry` the wrapper also puts the family's stand-ins in
place for the call, keeps the named arguments on the host and zeroes the tensors it returns.

The wrapper of a dispatch that serves traffic is the hot path's forwarder (`hotpath`), which passes every
argument on as it came.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from mlacheck.capture import hotpath
from mlacheck.capture.hooks import CaptureHooks

if TYPE_CHECKING:
    import inspect

    from mlacheck.capture.dry import DryStandIns


def wrap_dispatch(
    original: Callable, name: str, capture: CaptureHooks, every_call_looks_up: bool, dry: DryStandIns | None
) -> Callable:
    """A wrapper of one dispatch function that reports to `capture`. Where the rule says every call looks the
    cache up, a call that returns without a lookup is reported too (it ran a variant nothing checked)."""
    calls = capture.call_counter(name)
    ticks = capture.ticks

    def raised(error: BaseException, start: int, frame) -> None:
        capture.dispatch_raised(name, error, start, frame)

    def unlooked(frame) -> None:
        capture.dispatch_without_lookup(name, frame)

    checked = unlooked if every_call_looks_up else None
    if dry is None:
        dispatch = hotpath.forwarder(original, calls, ticks, raised, checked)
    else:
        import inspect  # here: only --dry needs a signature

        from mlacheck.capture.dry import zero_results  # here: only --dry loads it
        from mlacheck.capture.hotpath_py import counting

        signature = inspect.signature(original)

        def dry_call(*args: object, **kwargs: object) -> object:
            args, kwargs = _keep_on_host(signature, args, kwargs, dry)
            with dry.around_call():
                return zero_results(original(*args, **kwargs))

        dispatch = counting(dry_call, calls, ticks, raised, checked)
    functools.update_wrapper(dispatch, original)
    return dispatch


def _keep_on_host(signature: inspect.Signature, args: tuple, kwargs: dict, dry: DryStandIns) -> tuple[tuple, dict]:
    if not dry.host_arguments:
        return args, kwargs
    bound = signature.bind_partial(*args, **kwargs)
    for name in dry.host_arguments & bound.arguments.keys():
        bound.arguments[name] = dry.host_tensor(bound.arguments[name])
    return bound.args, bound.kwargs
