"""The capture's hot path: compiled (`_hotpath`, built with the package where a C compiler was there) or,
failing that, pure Python (`hotpath_py`, which states the contract both keep; imported only where it runs: a module
less in each observed process). MLACHECK_HOTPATH=python picks the pure Python one (to compare the two, or to rule the
compiled one out). `count_of` serves both."""

from __future__ import annotations

import os

try:
    if os.environ.get("MLACHECK_HOTPATH") == "python":
        raise ImportError("MLACHECK_HOTPATH=python")
    from mlacheck.capture._hotpath import (
        FLUSH_EVERY,
        ContainsDict,
        FastTable,
        GetDict,
        GetitemDict,
        read_tensors_natively,
    )
    from mlacheck.capture._hotpath import Counter as counter
    from mlacheck.capture._hotpath import Forwarder as forwarder
    from mlacheck.capture._hotpath import Launcher as launcher
    from mlacheck.capture._hotpath import ObservedCall as observed_call
    from mlacheck.capture._hotpath import Ticks as ticks

    IMPLEMENTATION = "c"
except ImportError:
    from mlacheck.capture.hotpath_py import (
        FLUSH_EVERY,
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


def count_of(counter) -> int:
    """How many times a counter was stepped (read without stepping it; `value` where it is a compiled one)."""
    value = getattr(counter, "value", None)
    return int(repr(counter)[6:-1]) if value is None else value


__all__ = [
    "FLUSH_EVERY",
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
    "ticks",
]
