"""What the spawn hook (program/spawns.py: a `spawn` event for each child an observed process starts by a fork and
exec) adds to starting the cheapest child there is, `subprocess.run(["true"])`: the hook installed against the
functions as Python has them, in turns A B B A in one process (5 turns of 200 children an arm), the median per arm.
The events go to a list here; in an observed process each is one line of its trace. Also printed: what making one
event costs (its fields read: the command line, whether it runs Python, the rank), alone. Target: what it adds is small
against a child's start (a Python worker takes 20 ms or more). Usage: python tests/benchmarks/bench_spawn_hook.py"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from mlacheck.program import spawns

REAL = {(module, name): getattr(sys.modules[module], name) for module, name in spawns.SPAWN_FUNCTIONS
        if hasattr(sys.modules[module], name)}  # fmt: skip


def hooked(on: bool, events: list) -> None:
    """The spawn functions as Python has them, then (on) hooked to append their events to `events`."""
    for (module, name), function in REAL.items():
        setattr(sys.modules[module], name, function)
    if on:
        spawns.hook(lambda make: events.append(make()), lambda: True)


def seconds_a_child(children: int = 200) -> float:
    started = time.perf_counter()
    for _ in range(children):
        subprocess.run(["true"], check=True)
    return (time.perf_counter() - started) / children


def main() -> None:
    events: list[dict] = []
    measured: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(5):
        for on in (False, True, True, False):
            hooked(on, events)
            measured[on].append(seconds_a_child())
    hooked(False, events)
    plain, hooked_median = statistics.median(measured[False]), statistics.median(measured[True])
    calls = 5000
    fork_exec_args = (["true"], [b"/usr/bin/true"], True, (), None, None)  # what subprocess passes, as far as it reads
    started = time.perf_counter()
    for _ in range(calls):
        spawns.spawn_event(0, *spawns._what_runs("fork_exec", fork_exec_args, {}))
    print(f"one spawn event made: {(time.perf_counter() - started) / calls * 1e6:.1f} us")
    print(
        f"subprocess.run(['true']): plain {plain * 1e6:.0f} us, with the spawn hook {hooked_median * 1e6:.0f} us: "
        f"+{(hooked_median - plain) * 1e6:.0f} us, ratio {hooked_median / plain:.3f} ({len(events)} spawn events)"
    )


if __name__ == "__main__":
    main()
