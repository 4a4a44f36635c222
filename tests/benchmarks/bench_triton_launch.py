"""Host time per launch of a small Triton kernel with mlacheck's Triton capture installed vs not, in one process;
and the capture's own time per compile (its hooks).

Launch: `add[grid](x, y, n, BLOCK=1024)` of a variant compiled beforehand, the path every serving launch takes
(`JITFunction.run`: binder, key, `kernel_cache.get`, launch). With the capture, that `get` is the counting dict's
(`capture/triton/families.py`): a variant seen in serving steps its counter from the dict's fast table. On a CUDA
device the launch is real (the kernel runs; the device is synchronized between turns, never inside one); without
one, the variant in the cache is a stand-in whose launch does nothing (Triton's own `run` up to the launch, for
`GPUTarget(cuda, 90)`, through a driver stand-in): the host time of everything but the C launcher.
The arms take turns in A B B A order (A: no capture, B: installed), 10 untimed launches then LAUNCHES timed ones
each; every launch is timed. The figure is the median over turn pairs of the ratio of the pair's medians, and
the median added time; the target is <= 1.02 (issue 20). No garbage collection runs while launches are timed.

Compile: the capture's hooks called as Triton calls them (the keyword arguments of a real compile), for a new
variant each time, writing to a JSONL trace as in program mode: the time per compile mlacheck adds (a compile of
this kernel takes 40-160 ms on a CPU, and a cubin load on a GPU).
Usage: python tests/benchmarks/bench_triton_launch.py [launches per turn (2000)] [turn pairs (20)]
"""

import gc
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton import knobs  # noqa: E402

from mlacheck.capture.policy import CapturePolicy  # noqa: E402
from mlacheck.capture.triton import TritonCapture  # noqa: E402
from mlacheck.rulefiles import load_rules  # noqa: E402
from mlacheck.sinks import JsonlSink, MemorySink  # noqa: E402

GPU = torch.cuda.is_available()
TARGET = 1.02
RULE = load_rules().tritons["triton"]


@triton.jit
def add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


class StandIn:
    """Without a GPU: what the cache holds for the variant; its launch does what the C launcher does with Triton's
    launch hooks (calls them where set), nothing else."""

    function, packed_metadata = 0, None

    def launch_metadata(self, grid, stream, *args):
        return None

    def run(self, gx, gy, gz, stream, function, packed, metadata, enter, exit_, *args):
        if enter is not None:
            enter(metadata)
        if exit_ is not None:
            exit_(metadata)


def setup():
    device = "cuda" if GPU else "cpu"
    x = torch.zeros(4096, device=device)
    y = torch.zeros(4096, device=device)
    if GPU:
        add[(4,)](x, y, 4096, BLOCK=1024)  # compiles the variant
        torch.cuda.synchronize()
    else:
        from triton.backends.compiler import GPUTarget
        from triton.runtime.driver import driver

        from mlacheck.capture.triton.dry import DryDriver

        driver.set_active(DryDriver(GPUTarget("cuda", 90, 32), "sm_90a"))
        seen = []
        knobs.runtime.jit_cache_hook = lambda **kwargs: seen.append(kwargs["key"]) or True
        add[(4,)](x, y, 4096, BLOCK=1024)  # the variant's real key, nothing compiled
        knobs.runtime.jit_cache_hook = None
        [(_, entry)] = add.device_caches.items()
        entry[0][seen[0]] = StandIn()
    return lambda: add[(4,)](x, y, 4096, BLOCK=1024)


def turn(launch, count: int) -> float:
    """The median host time of `count` launches, in microseconds (after 10 untimed ones)."""
    for _ in range(10):
        launch()
    times = []
    clock = time.perf_counter_ns
    gc.disable()
    for _ in range(count):
        started = clock()
        launch()
        times.append(clock() - started)
    gc.enable()
    if GPU:
        torch.cuda.synchronize()
    return statistics.median(times) / 1000


def launches(count: int, pairs: int) -> None:
    launch = setup()
    capture = TritonCapture(RULE, MemorySink(), CapturePolicy())
    ratios, added = [], []
    for _ in range(pairs):
        medians = {}
        for arm in ("A", "B", "B", "A"):
            if arm == "B":
                capture = TritonCapture(RULE, MemorySink(), CapturePolicy())
                capture.install()
            medians.setdefault(arm, []).append(turn(launch, count))
            if arm == "B":
                capture.remove()
        a, b = statistics.mean(medians["A"]), statistics.mean(medians["B"])
        ratios.append(b / a)
        added.append(b - a)
    base = statistics.median(t for t in [turn(launch, count) for _ in range(3)])
    ratio = statistics.median(ratios)
    print(
        f"launch ({'GPU: ' + torch.cuda.get_device_name() if GPU else 'CPU: stand-in launch'}, triton "
        f"{triton.__version__}): {base:.2f} us per launch without capture; with capture x{ratio:.4f} "
        f"(+{statistics.median(added):.3f} us), median over {pairs} A B B A pairs of {count} launches; "
        f"pairs' ratios {min(ratios):.4f}..{max(ratios):.4f}; target <= {TARGET}: "
        + ("met" if ratio <= TARGET else "NOT met")
    )


def compiles(count: int) -> None:
    """The capture's hooks per compile, called with a real compile's arguments for `count` new variants."""
    recorded = []
    knobs.runtime.jit_cache_hook = lambda **kwargs: recorded.append(kwargs) or True
    x = torch.zeros(64)
    add.run(x, x, 17, BLOCK=16, grid=(1,), warmup=True)  # (a new key: the arguments of a compile, nothing compiled)
    knobs.runtime.jit_cache_hook = None
    [kwargs] = recorded
    with tempfile.TemporaryDirectory() as folder:
        capture = TritonCapture(RULE, JsonlSink(os.path.join(folder, "trace.jsonl")), CapturePolicy())
        capture.install()
        hook, post = knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook
        keys = [kwargs["key"].replace("'debug'", f"'n{index}': 0, 'debug'") for index in range(count)]
        gc.disable()
        started = time.perf_counter()
        for key in keys:
            hook(**{**kwargs, "key": key})
            post(**{**kwargs, "key": key})
        per_compile = (time.perf_counter() - started) / count * 1e6
        gc.enable()
        capture.remove()
    print(f"compile: the capture's hooks take {per_compile:.1f} us per compile (new variant, events to a JSONL trace)")


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    launches(count, pairs)
    compiles(500)
