"""Engine steps: each call of an engine's step function (`[[step]]` in the rules, `--step`) is one step of its
serving loop. A step far slower than the process's usual step is recorded as a `slow_step` event (its seconds, the
usual seconds, when it began), so that a serving-path compile on one rank shows, on the ranks that waited for it at
the next collective, as their slow step at the same moment (`analysis/waits.py` pairs them).

A step is slow when it takes at least SLOW_SECONDS and SLOW_FACTOR times the median of the process's last WINDOW
steps, after at least MIN_STEPS steps (before that there is no usual). Nothing else is written: a trace still grows
with what is unusual, not with time. Imported by an observed process only where the rules name a step function.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable

from mlacheck.events import run_clock, slow_step_event

SLOW_SECONDS = 0.5
SLOW_FACTOR = 5.0
WINDOW = 32
MIN_STEPS = 3


class StepClock:
    """The steps of one step function in one process: their recent seconds, and each slow one written."""

    def __init__(self, function: str, write: Callable[[dict], None], serving: Callable[[], bool]) -> None:
        self.function, self._write, self._serving = function, write, serving
        self._recent: deque[float] = deque(maxlen=WINDOW)
        self.steps = 0

    def record(self, began: float, seconds: float) -> None:
        """One step ended: it began `began` seconds after the run event and took `seconds`."""
        if len(self._recent) >= MIN_STEPS:
            usual = statistics.median(self._recent)
            if seconds >= SLOW_SECONDS and seconds >= SLOW_FACTOR * usual:
                self._write(slow_step_event(self.function, seconds, usual, self.steps, self._serving(), began))
        self._recent.append(seconds)
        self.steps += 1

    def timed(self, original: Callable) -> Callable:
        """A wrapper of the step function that times each call (whatever it returns or raises) and records it."""
        record = self.record

        def step(*args: object, **kwargs: object) -> object:
            began, started = run_clock(), time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                record(began, time.perf_counter() - started)

        step.__wrapped__ = original
        step.__name__ = getattr(original, "__name__", "step")
        step.__qualname__ = getattr(original, "__qualname__", step.__name__)
        return step
