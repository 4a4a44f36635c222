"""The hot-path implementations this build has: pure Python always, compiled where the package was built with it."""

from mlacheck.capture import hotpath_py as PYTHON

try:
    from mlacheck.capture import _hotpath as COMPILED
except ImportError:
    COMPILED = None

HOTPATHS = [PYTHON] if COMPILED is None else [PYTHON, COMPILED]
