"""The hot-path implementations this build has (pure Python always, compiled where the package was built with it), and
a key field that counts its hashes, which the tests of both hot paths use."""

from mlacheck.capture import hotpath_py as PYTHON

try:
    from mlacheck.capture import _hotpath as COMPILED
except ImportError:
    COMPILED = None

HOTPATHS = [PYTHON] if COMPILED is None else [PYTHON, COMPILED]


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
