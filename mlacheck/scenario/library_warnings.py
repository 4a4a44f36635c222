"""The warnings of the libraries the scenario drives, held back: mlacheck's own calls into them (the engine's modelled
steps, its dry-mode stand-ins) make torch, CUTLASS and FlashInfer warn about code no user wrote (CUTLASS's
`base_dsl/dsl.py` on FA4's `aux_data` argument, `pipeline/helpers.py` on FlashInfer's NamedBarrier, torch on the
data pointer of dry mode's fake tensors). They are counted for the report header instead of printed above it; -v
shows them. A user's warm-up function (--warmup FILE:FUNC) is the user's code: its step is not held (`plan.Step`).

Held with `warnings.catch_warnings` around each of the scenario's own calls, in mlacheck's own process, so every
other warning, and the filters of whoever runs mlacheck, stay as they are; a filter a library sets meanwhile is kept,
as it would have been (CUTLASS's DSL ignores its DSLOptimizationWarning from its first use on, base_dsl/dsl.py:392).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator


class LibraryWarnings:
    """The library warnings of one scenario run: held back (or, with `shown`, printed as Python prints them)."""

    def __init__(self, shown: bool = False) -> None:
        self.shown = shown
        self._held: list[warnings.WarningMessage] = []

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold back what the libraries warn while the scenario calls them."""
        if self.shown:
            yield
            return
        before = list(warnings.filters)
        with warnings.catch_warnings(record=True) as caught:
            try:
                yield
            finally:
                self._held += caught
                added = [entry for entry in warnings.filters if entry not in before]
        for action, message, category, module, lineno in reversed(added):
            warnings.filterwarnings(
                action, message.pattern if message else "", category, module.pattern if module else "", lineno
            )

    @property
    def count(self) -> int:
        """How many would have been printed: Python prints a warning once per text and place."""
        return len({(w.category, str(w.message), w.filename, w.lineno) for w in self._held})
