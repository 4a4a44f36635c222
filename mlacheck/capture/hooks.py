"""What a cache adapter and a dispatch wrapper may ask of the capture they report to (`FamilyCapture` is it).

Adapters and wrappers know this protocol, never the capture's class, so that the capture can pick its adapter
from a table without either importing the other.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from types import FrameType
from typing import Protocol

from mlacheck.capture.policy import CapturePolicy
from mlacheck.capture.stack import Where

MISSING = object()
"""The value a `contains` lookup that found nothing reports (the insert follows)."""

LaunchPolicy = Callable[[dict, object], object]
"""(typed key, compiled kernel) of a dispatch's lookup -> what the dispatch gets back and launches."""


class CaptureHooks(Protocol):
    """The capture of one family in one process, as its adapter and dispatch wrappers see it."""

    fast: object  # hotpath.FastTable: variants seen in serving, key -> (counter, value to return)
    ticks: object  # hotpath.ticks (each thread's own): stepped by each dispatch call's entry and by each lookup
    launch: LaunchPolicy | None
    policy: CapturePolicy

    def inserted(
        self,
        key: object,
        value: object,
        frame: FrameType,
        seconds: float | None = None,
        origin: str | None = None,
        phase: str | None = None,
        start: int | None = None,
        **cache: list[str],
    ) -> None:
        """A variant entered the cache (`origin` and `seconds` where the adapter timed the compile itself, and `start`,
        the id of its compile_start (`compiling`); `phase` where the adapter knows it better than the stack does;
        `cache`: a disk cache's `entries` the compile made and `foreign` entries found since the last record)."""

    def looked_up(
        self, key: object, value: object, frame: FrameType, where: Where | None = None, count: bool = True
    ) -> object:
        """A lookup the fast path did not serve; returns what the lookup gives the program."""

    def where(self, frame: FrameType) -> Where | None:
        """Where a cache access happened (None where the stack could not be read: an internal error)."""

    def phase_at(self, where: Where) -> str:
        """The phase of a compile at `where`, now (`capture.phase.decide`)."""

    def launched(self, key: object, value: object, frame: FrameType) -> object:
        """What the value of a `contains` family's lookup is replaced by for a dispatch under a launch policy."""

    def compiling(self, frame: FrameType, key: object = ..., fresh: bool = True) -> AbstractContextManager[int | None]:
        """Around a compile called from `frame` (of `key` where it is known; a `fresh` key's, that the cache may not
        hold yet): its `compile_start` and `compile_end` events; gives the compile_start's id (None: none written)."""

    def compile_began(self, frame: FrameType, key: object = ...) -> int | None:
        """A compile begins (`compile_start`); its id for `compile_ended`."""

    def compile_ended(self, start: int | None, seconds: float, outcome: str) -> None:
        """The compile ended (`compile_end`): returned, raised, or cached (it made nothing)."""

    def unwatched_began(self, frame: FrameType, kernel: str) -> tuple | None:
        """A call that may build a kernel no variant stands for begins (`kernel`: what was called): its `compile_start`,
        as a compile net's; what `unwatched_ended` needs (None where it was lost, an internal error)."""

    def unwatched_ended(
        self,
        start: tuple | None,
        seconds: float,
        outcome: str,
        fields: Callable[[], dict],
        entries: list[str] | None = None,
    ) -> None:
        """That call ended (`compile_end`): returned (it built a kernel: its `unwatched_compile`, built for what
        `fields()` reads, with the disk cache `entries` it made), raised, or cached (it built nothing)."""

    def call_counter(self, name: str) -> object:
        """The counter of calls of a dispatch function (or `function!before` etc.)."""

    def dispatch_raised(self, name: str, error: BaseException, start: int, frame: FrameType) -> None: ...

    def dispatch_without_lookup(self, name: str, frame: FrameType) -> None: ...

    def forget_fast(self) -> None:
        """Every variant's next lookup reads the stack again."""

    def cleared(self) -> None:
        """The cache was emptied: its variants compile again when next used."""

    def maybe_flush(self) -> None: ...

    def flush(self, final: bool = False) -> None:
        """Write what went past capture (the adapters' audit), then the counts."""

    def safely(self, where: str, action: Callable[[], object]) -> None:
        """Run a capture action; a failure becomes an internal error, never an exception in the program."""

    def internal_error(self, where: str, error: object) -> None:
        """Something capture could not see or do: the run cannot pass."""
