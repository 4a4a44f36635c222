"""A family's counts in one process: dispatches per (variant, phase), calls per dispatch function, and when they were
last written (a trace holds cumulative totals, written at a bounded interval and at exit)."""

from __future__ import annotations

import time

from mlacheck.capture import hotpath
from mlacheck.capture.hotpath import count_of


class Counts:
    """The counters the hot path steps, and the totals last written."""

    def __init__(self) -> None:
        self._dispatches: dict[tuple[int, str], object] = {}
        self._calls: dict[str, object] = {}
        self._call_base: dict[str, int] = {}  # a forked child counts from what it inherited
        self._written: dict | None = None
        self._written_at = time.monotonic()

    def dispatches(self, vid: int, phase: str) -> object:
        """The counter of a variant's dispatches in a phase."""
        counter = self._dispatches.get((vid, phase))
        if counter is None:
            counter = self._dispatches[(vid, phase)] = hotpath.counter()
        return counter

    def calls(self, name: str) -> object:
        """The counter of a dispatch function's calls (or of `function!before`, `!after`, `!nolookup`)."""
        counter = self._calls.get(name)
        if counter is None:
            counter = self._calls[name] = hotpath.counter()
        return counter

    def serving_as_warmup(self) -> None:
        """Serving starts now: what was counted as serving so far was warm-up."""
        for (vid, phase), counter in list(self._dispatches.items()):
            if phase == "serving":
                warmup = self._dispatches.get((vid, "warmup"))
                total = count_of(counter) + (count_of(warmup) if warmup else 0)
                self._dispatches[(vid, "warmup")] = hotpath.counter(total)
                del self._dispatches[(vid, phase)]

    def restart(self) -> None:
        """In a forked child: dispatches count from zero, calls from what the child inherited."""
        self._dispatches.clear()
        self._call_base = {name: count_of(counter) for name, counter in self._calls.items()}
        self._written = None

    def due(self, seconds: float) -> bool:
        """Whether `seconds` have passed since the totals were last written."""
        return time.monotonic() - self._written_at >= seconds

    def to_write(self, final: bool = False) -> dict | None:
        """The totals, where they changed since last written (or finally); None where nothing is to be written."""
        self._written_at = time.monotonic()
        dispatches = {f"{vid}:{phase}": count_of(counter) for (vid, phase), counter in self._dispatches.items()}
        calls = {name: count_of(counter) - self._call_base.get(name, 0) for name, counter in self._calls.items()}
        totals = {"dispatches": dispatches, "calls": calls}
        if totals == self._written and not final:
            return None
        self._written = totals
        return totals
