"""What the compiled observed call (a jit_dir family's operation: DeepGEMM's `fp8_fp4_gemm_nt`) adds to a hit, with its
tensors' fields read below Python (capture/tensor_fields.py) and through Python, for one shape served again and again
and for a model's shapes taking turns (more than the memo's two slots per hash would hold if it were smaller). The
operation is a no-op, so the figure is the observed call's own cost. The arms take turns in A B B A order; each turn
times 20 000 calls of every shape (the best of 5 repeats); the run's figure per arm is the median over 4 turns.
Then the same hit with its caches cold, as on a device, where each call comes after a launch of tens of microseconds
of native code: the operation copies 2 MB (more than this CPU's L2), and the figure is the median of per-call times,
observed minus plain, in A B B A turns of 200 calls.
Usage: python tests/benchmarks/bench_observed_call.py"""

from __future__ import annotations

import gc
import itertools
import statistics
import sys
import time
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mlacheck.capture import hotpath  # noqa: E402
from mlacheck.capture.caches.jit_keys import KINDS, raw  # noqa: E402
from tests.unit.hotpaths import read_natively  # noqa: E402

NUMBER, REPEAT, TURNS = 20_000, 5, 4


def operation(*args):
    return None


def gemm(n: int) -> tuple:
    """A DeepGEMM-shaped call: a, its scales, b, its scales, d, then the operation's other arguments."""
    return (
        torch.empty(64, 7168, dtype=torch.float8_e4m3fn),
        torch.ones(64, 56),
        torch.empty(n, 7168, dtype=torch.float8_e4m3fn),
        torch.ones(17, 56),
        torch.empty(64, n, dtype=torch.bfloat16),
        None,
        None,
        None,
        None,
        "",
        False,
        None,
        0,
        0.0,
        None,
    )


def observed(calls: list[tuple], operation=operation):
    fast, state, positions = hotpath.FastTable(), [(None,) * 4], list(range(15))
    for args in calls:
        fast[("op", state[0], *[raw(args[at]) for at in positions])] = (itertools.count(), None)

    def slow(key, args, kwargs, frame):
        raise SystemExit("a call went to the slow path: the benchmark measures hits")

    return hotpath.observed_call(operation, "op", state, positions, KINDS, fast, hotpath.ticks(), lambda: None, slow)


def per_call_ns(call, calls: list[tuple]) -> float:
    def run():
        for args in calls:
            call(*args)

    return min(timeit.repeat(run, number=NUMBER, repeat=REPEAT)) / NUMBER / len(calls) * 1e9


def arm(native: bool, calls: list[tuple]) -> float:
    assert hotpath.read_tensors_natively is not None, "the compiled hot path was not built here"
    assert read_natively(native) == native
    return per_call_ns(observed(calls), calls) - per_call_ns(operation, calls)


def cold_added_ns(native: bool, copied: int = 2 << 20, turns: int = 40, calls: int = 200) -> tuple[float, float]:
    """(plain ns, ns added) of a hit whose operation copies `copied` bytes: the observed call's data and code cold."""
    source, target = bytearray(copied), bytearray(copied)

    def copying(*args):
        target[:] = source

    assert read_natively(native) == native
    args = gemm(2112)
    hit = observed([args], copying)
    clock, medians = time.perf_counter_ns, {False: [], True: []}
    gc.disable()
    try:
        for _ in range(turns):
            for instrumented in (False, True, True, False):
                call, times = (hit if instrumented else copying), []
                for _ in range(calls):
                    started = clock()
                    call(*args)
                    times.append(clock() - started)
                medians[instrumented].append(statistics.median(times))
    finally:
        gc.enable()
    plain = statistics.median(medians[False])
    return plain, statistics.median(medians[True]) - plain


def main() -> None:
    for shapes in (1, 16):
        calls = [gemm(2112 + 128 * at) for at in range(shapes)]
        added = {True: [], False: []}
        for _ in range(TURNS // 2):
            for native in (True, False, False, True):
                added[native].append(arm(native, calls))
        below, through = statistics.median(added[True]), statistics.median(added[False])
        print(
            f"{shapes} shape(s) in turn, five tensors a call: +{below:.0f} ns a hit with the fields read below "
            f"Python, +{through:.0f} ns through Python (x{through / below:.1f})"
        )
    plain, below = cold_added_ns(True)
    _, through = cold_added_ns(False)
    print(
        f"one shape, caches cold (each call after a 2 MB copy of {plain / 1e3:.1f} us): +{below:.0f} ns a hit with the "
        f"fields read below Python, +{through:.0f} ns through Python"
    )
    read_natively(True)


if __name__ == "__main__":
    main()
