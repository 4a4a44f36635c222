"""What a jit_dir key holds of an argument a native operation is passed (`raw`) and of a call (`call_key`), how the
trace writes it (`text`), and which keys hold values only (`by_value`). A tensor is keyed by its dtype, shape and layout (`hotpath_py.layout`: which
dimension has stride 1), since the library picks its kernel by them."""

from __future__ import annotations

from mlacheck.capture.hotpath_py import layout

TENSOR = object()  # marks a tensor's (dtype, shape, layout) in a key
KINDS: dict[type, object] = {}
"""How the hot path keys an argument of a type seen (hotpath.observed_call's kinds): TENSOR, by its dtype, shape and
layout; None, as itself (only a type that cannot hold a shape: no `shape` on the type, no instance dict)."""


def raw(value: object) -> object:
    """What a key holds of an argument: a tensor's dtype, shape and layout, a list as a tuple, anything else itself
    (and which of these its type takes, noted for the hot path)."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        KINDS[type(value)] = TENSOR
        return (TENSOR, value.dtype, shape, layout(value))
    if isinstance(value, list):
        return tuple(value)
    if not hasattr(type(value), "shape") and not hasattr(value, "__dict__"):
        KINDS.setdefault(type(value), None)
    return value


def call_key(name: str, settings: tuple, parameters: list[str], keyed: tuple[str, ...], args: tuple, kwargs: dict):
    """A call's key as the slow path builds it (positional arguments by `parameters`, then the keywords): the
    operation, the settings, then each `keyed` argument's `raw` form (None where the call did not pass it)."""
    arguments = dict(zip(parameters, args)) | kwargs
    return (name, settings, *[raw(arguments.get(parameter)) for parameter in keyed])


def text(value: object) -> object:
    """A key field as the trace holds it: a tensor as dtype[shape] (then where its dimension of stride 1 is where its
    strides are known and it is not the last), a tuple as a list."""
    if _tensor(value):
        _, dtype, shape, last = value
        written = f"{str(dtype).removeprefix('torch.')}{list(shape)}"
        if last in (None, -1) or not shape:
            return written
        return f"{written} ({f'dimension {len(shape) + last}' if last else 'no dimension'} of stride 1)"
    return list(value) if isinstance(value, tuple) else value


def by_value(field: object) -> bool:
    """Whether a key (or a field of one) holds values only, never an object by its identity (a list of tensors does):
    only such a key can be remembered without keeping its objects alive and without growing with every new one."""
    if _tensor(field):
        return True
    if isinstance(field, tuple):
        return all(by_value(item) for item in field)
    return field is None or isinstance(field, (bool, int, float, str))


def _tensor(value: object) -> bool:
    return isinstance(value, tuple) and len(value) == 4 and value[0] is TENSOR
