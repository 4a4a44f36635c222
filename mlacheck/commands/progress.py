"""Progress on stderr while a run goes: its phases and each compile with its seconds.

Only where stderr is a terminal, and not with --quiet (the CLI decides). Nothing here knows how events are made:
the scenario and program mode call `phase(name)` and `event(event)` (a trace event; the scenario's capture sink
is teed to it, program mode follows the run folder's traces).

- `LiveProgress` (the embedded scenario): a transient live display, a spinner with the phase and its elapsed
  time over the compiles so far; it is gone when the run ends, and the report follows.
- `LogProgress` (program mode, whose program writes to the same terminal): one plain line per phase and per
  compile, which the program's own output cannot garble.
"""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from mlacheck.capture.phase import NOT_COMPILED_HERE
from mlacheck.keys import fields_text
from mlacheck.report.common import printable

SHOWN = 6  # compiles the live display lists (the latest)
PHASES = {"warmup": "warm-up", "serving": "serving path"}


def compile_line(event: dict) -> Text | None:
    """ "tokenspeed_mla.prefill compiled in 4.7 s (warm-up)" for a compile event; None for other events and for
    entries that were in the cache before, or ran another key's kernel (nothing compiled them while mlacheck
    watched)."""
    if event.get("type") != "compile" or event.get("phase") in NOT_COMPILED_HERE:
        return None
    seconds = event.get("seconds")
    phase = PHASES.get(event.get("phase"), event.get("phase"))
    text = Text(f"{printable(str(event.get('family')))} ", no_wrap=True, overflow="ellipsis")
    text.append(f"compiled in {seconds:.1f} s" if seconds is not None else "key recorded (not compiled)")
    where = f" ({phase}" + (f", pid {event['pid']}" if event.get("pid") else "") + ")"
    text.append(where, style="bold red" if event.get("phase") == "serving" else "dim")
    if event.get("key"):
        text.append(f"  {printable(fields_text(event['key']))}", style="dim")  # cut at the console's width
    return text


class LiveProgress:
    """The scenario's transient display; a context manager."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._phase, self._since = "starting", time.monotonic()
        self._compiles: list[Text] = []
        self._count, self._seconds = 0, 0.0
        self._spinner = Spinner("dots")
        self._live = Live(get_renderable=self._render, console=console, transient=True, refresh_per_second=8)

    def __enter__(self) -> LiveProgress:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()

    def phase(self, name: str) -> None:
        self._phase, self._since = name, time.monotonic()
        self._live.refresh()  # shown now, however short the phase

    def event(self, event: dict) -> None:
        line = compile_line(event)
        if line is not None:
            self._compiles = [
                *self._compiles[-(SHOWN - 1) :],
                Text("  ", no_wrap=True, overflow="ellipsis").append_text(line),
            ]
            self._count += 1
            self._seconds += event.get("seconds") or 0.0
            self._live.refresh()

    def _render(self) -> Group:
        elapsed = time.monotonic() - self._since
        self._spinner.update(text=Text(f"{self._phase}  {elapsed:.0f} s", style="bold"))
        head = self._spinner
        total = Text(f"{self._count} compile(s), {self._seconds:.1f} s", style="dim") if self._count else Text("")
        return Group(head, *self._compiles, total)


class LogProgress:
    """Program mode's progress: a line on stderr per phase and per compile."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def phase(self, name: str) -> None:
        self.console.print(Text(f"mlacheck: {printable(name)}", style="dim"), no_wrap=True, overflow="ellipsis")

    def event(self, event: dict) -> None:
        line = compile_line(event)
        if line is not None:
            self.console.print(Text("mlacheck: ").append_text(line), no_wrap=True, overflow="ellipsis")
