"""The capture's hot path: compiled (`_hotpath`, built with the package where a C compiler was there) or,
failing that, pure Python (`hotpath_py`, which states the contract both keep). MLACHECK_HOTPATH=python picks
the pure Python one (to compare the two, or to rule the compiled one out)."""

from __future__ import annotations

import os

from mlacheck.capture.hotpath_py import count_of, shows

try:
    if os.environ.get("MLACHECK_HOTPATH") == "python":
        raise ImportError("MLACHECK_HOTPATH=python")
    from mlacheck.capture._hotpath import ContainsDict, FastTable, GetDict, GetitemDict, read_tensors_natively
    from mlacheck.capture._hotpath import Counter as counter
    from mlacheck.capture._hotpath import Forwarder as forwarder
    from mlacheck.capture._hotpath import Launcher as launcher
    from mlacheck.capture._hotpath import ObservedCall as observed_call
    from mlacheck.capture._hotpath import Ticks as ticks

    IMPLEMENTATION = "c"
except ImportError:
    from mlacheck.capture.hotpath_py import (
        ContainsDict,
        FastTable,
        GetDict,
        GetitemDict,
        counter,
        forwarder,
        launcher,
        observed_call,
        ticks,
    )

    read_tensors_natively = None  # the pure Python hot path reads every field through Python
    IMPLEMENTATION = "python"

__all__ = [
    "IMPLEMENTATION",
    "ContainsDict",
    "FastTable",
    "GetDict",
    "GetitemDict",
    "count_of",
    "counter",
    "forwarder",
    "launcher",
    "observed_call",
    "read_tensors_natively",
    "shows",
    "ticks",
]
