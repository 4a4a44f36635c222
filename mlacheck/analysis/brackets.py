"""The compiles of the traces read so far that are not closed (`Brackets`): a `compile_start` is held until its compile
ends other than by returning, or until the record of what it made comes; one that returned awaits that record.

A record that names its compile (a `compile` event's `start`, format 4) closes that compile alone, ended or not; one
that names no open compile of its family in its process is a stray (`named` says so). A record that names none (a
compile net's, or any of a trace older than format 4) closes the first returned compile like it (`Awaited`). A
compile_start whose id its process used already does not hide the earlier compile: it is kept (`displaced`).
"""

from __future__ import annotations

from collections.abc import Iterator

from mlacheck.analysis.awaited import Awaited

Begun = tuple[int, dict, dict | None]  # (its position, its compile_start, its compile_end where it returned)


class Brackets:
    """The compiles not closed, by (process, id): `take` reads a compile_start or compile_end, `named` and `matched`
    a record, `left` gives what is still open at the end."""

    def __init__(self) -> None:
        self.starts: dict[tuple, Begun] = {}
        self.awaited = Awaited()  # of `starts`, those that returned: by family or net, and by variant
        self.displaced: list[tuple[int | None, Begun]] = []  # of a compile_start whose id came again in its process

    def take(self, index: int, event: dict, proc: int | None, kind: str) -> None:
        """A compile began, or ended (one that returned awaits its record)."""
        key = (proc, event["id"])
        begun = self.starts.get(key) if kind == "compile_start" else self.starts.pop(key, None)
        if begun is not None and begun[2] is not None:  # (it had returned: no longer awaited as it was)
            self.awaited.remove(key, begun[1])
        if kind == "compile_start":
            if begun is not None:
                self.displaced.append((proc, begun))
            self.starts[key] = (index, event, None)
        elif begun is not None and event.get("outcome", "returned") == "returned":
            self.starts[key] = (begun[0], begun[1], event)  # its record follows
            self.awaited.add(key, begun[1])

    def named(self, proc: int | None, event: dict) -> bool:
        """A record closes the compile it names (`start`), begun in its process for its family and open; False where
        there is none such (a stray: it closes nothing)."""
        key = (proc, event["start"])
        begun = self.starts.get(key)
        if begun is None or begun[1].get("family") != event["family"]:
            return False
        del self.starts[key]
        if begun[2] is not None:  # (it had returned and awaited its record)
            self.awaited.remove(key, begun[1])
        return True

    def matched(self, proc: int | None, event: dict) -> None:
        """A record that names no compile closes the first that returned and awaits a record like it (`Awaited`)."""
        closed = self.awaited.closed(proc, event)
        if closed is not None:
            self.awaited.remove(closed, self.starts.pop(closed)[1])

    def left(self) -> Iterator[tuple[int | None, Begun]]:
        """(process, the compile) of each compile never closed, the displaced ones last."""
        for (proc, _), begun in self.starts.items():
            yield proc, begun
        yield from self.displaced
