"""Ctrl-C during the scenario: recorded where it lands, raised at the next step boundary.

A KeyboardInterrupt raised inside `cute.compile` can land in a Python callback its native code made: nanobind
turns it into a C++ exception that nothing catches, and the process aborts (`terminate called after throwing an
instance of 'nanobind::python_error'`, exit 134, no report). So while the scenario runs, SIGINT only records
itself (and tells `on_interrupt`); `check()`, called by the scenario between its steps (after each warm-up
function, capture forward, prefill call and decode step, so after the compile under way), raises the
KeyboardInterrupt there, in the scenario's own Python code. The run then reports what it recorded, with exit 130.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


class DeferredInterrupt:
    """A context manager holding SIGINT back (main thread only; elsewhere nothing changes)."""

    def __init__(self, on_interrupt: Callable[[], object] = lambda: None) -> None:
        self.on_interrupt = on_interrupt
        self.pending = False
        self._previous = None

    def __enter__(self) -> DeferredInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _record(self, signum: int, frame: object) -> None:
        if not self.pending:
            self.pending = True
            try:
                self.on_interrupt()
            except Exception:  # noqa: BLE001 - a display's failure must not turn into the exception held back
                pass

    def check(self) -> None:
        """Raise the KeyboardInterrupt held back, here (a step boundary)."""
        if self.pending:
            raise KeyboardInterrupt
