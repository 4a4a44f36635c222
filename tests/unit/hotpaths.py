"""The hot-path implementations this build has (pure Python always, compiled where the package was built with it, and
the compiled one reading exact tensors' fields below Python: NATIVE), and a key field that counts its hashes, which
the tests of the hot paths use."""

import contextlib
import types

import pytest
import torch

from mlacheck.capture import hotpath_py as PYTHON
from mlacheck.capture import tensor_fields

try:
    from mlacheck.capture import _hotpath as COMPILED
except ImportError:
    COMPILED = None

HOTPATHS = [PYTHON] if COMPILED is None else [PYTHON, COMPILED]
NATIVE = NATIVE_ONE_SLOT = None
if COMPILED is not None:
    _names = {name: getattr(COMPILED, name) for name in dir(COMPILED) if name[0] != "_"}
    NATIVE = types.SimpleNamespace(**_names, __name__="compiled, tensors read natively", memo=None)
    # one memo slot: every call is compared with the last key served, whatever its hash (the compare, driven alone)
    NATIVE_ONE_SLOT = types.SimpleNamespace(**_names, __name__="compiled, natively, one memo slot", memo=1)
OBSERVED_HOTPATHS = HOTPATHS if NATIVE is None else [*HOTPATHS, NATIVE, NATIVE_ONE_SLOT]  # an observed call's tests


def read_natively(on: bool) -> bool:
    """Turn the compiled hot path's native tensor reading on or off (process-wide); whether it is on."""
    if on:
        return tensor_fields._enable()
    return COMPILED.read_tensors_natively((torch.Tensor, torch.nn.Parameter), "", [], None)


def compiled_only() -> None:
    """Skip a test of the compiled hot path where the capture runs the pure Python one (MLACHECK_HOTPATH=python, or no
    build: test_hotpath.py says whether that build was due)."""
    from mlacheck.capture import hotpath

    if hotpath.IMPLEMENTATION != "c":
        pytest.skip("the capture runs the pure-Python hot path here: no tensor is read natively")


@contextlib.contextmanager
def reading(hot):
    """`hot` for one test: NATIVE (either) with the native reading on, COMPILED with it off; as it was after."""
    if hot is PYTHON:
        yield hot
        return
    native = hot in (NATIVE, NATIVE_ONE_SLOT)
    if native:
        compiled_only()
    assert read_natively(native) == native
    try:
        yield hot
    finally:
        read_natively(tensor_fields._answer == [True])


class Field:
    """A key field (a dtype, a dimension) that counts how often it is hashed: what the hot paths' key memo saves."""

    hashed = 0

    def __init__(self, name):
        self.name = name

    def __hash__(self):
        Field.hashed += 1
        return hash(self.name)

    def __eq__(self, other):
        return isinstance(other, Field) and other.name == self.name
