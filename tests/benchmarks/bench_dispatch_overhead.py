"""Host time per tokenspeed_mla_prefill call with mlacheck's capture installed vs not, in one process.

Same tensors, the launch a no-op both ways (without capture a no-op sits in the library's cache; with
capture the trace-mode Launcher stands in). Blocks alternate A B B A so that drift does not favour either
side; the figure is the median over block pairs of (with / without). Target: <= 1.02.
On a CUDA device it runs in trace mode; without one, in dry mode on the CPU.
Usage: python tests/benchmarks/bench_dispatch_overhead.py [pairs] [calls per block]
"""

import gc
import os
import statistics
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_100a")

import torch  # noqa: E402

import tokenspeed_mla  # noqa: E402
from mlacheck.capture import FamilyCapture  # noqa: E402
from mlacheck.events import MemorySink  # noqa: E402
from mlacheck.rules import load_rules  # noqa: E402
from mlacheck.scenario.dispatch import FP8, dispatch, empty_tensors  # noqa: E402
from mlacheck.scenario.prefill_run import Launcher  # noqa: E402
from mlacheck.scenario.presets import model_preset  # noqa: E402
from mlacheck.scenario.traffic import PrefillCall  # noqa: E402
from tokenspeed_mla import mla_prefill  # noqa: E402

DRY = not torch.cuda.is_available()


def block(call, tensors, model, calls: int) -> float:
    gc.collect()  # a collection triggered by set-up (install, remove) must not land in a timed block
    if not DRY:
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        dispatch(tokenspeed_mla.tokenspeed_mla_prefill, call, tensors, model, True, dry=DRY)
    if not DRY:
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / calls


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    model = model_preset("deepseek-v3")
    call = PrefillCall("extend", True, True, (512, 1024), (512, 1024), (0, 0))
    tensors = empty_tensors(call, model, "cpu" if DRY else "cuda")
    key = (FP8, model.d_qk, model.d_v, True, True, True, mla_prefill._enable_ex2_emulation())
    mla_prefill._compiled_kernels[key] = lambda *args: None  # a precompiled no-op launch
    [rule] = load_rules()
    sink = MemorySink()
    capture = FamilyCapture(rule.family, sink, "real", Launcher(execute=False).stand_in)

    def instrumented() -> float:
        capture.install()
        try:
            return block(call, tensors, model, calls)
        finally:
            capture.remove()


    block(call, tensors, model, 300)  # warm
    ratios, plain, captured = [], [], []
    for number in range(pairs):
        first, second = (block(call, tensors, model, calls), instrumented()) if number % 2 == 0 else (None, None)
        if number % 2:
            second, first = instrumented(), block(call, tensors, model, calls)
        plain.append(first)
        captured.append(second)
        ratios.append(second / first)
    where = "dry mode, CPU" if DRY else f"trace mode, {torch.cuda.get_device_name()}"
    print(f"{where}: {pairs} block pairs x {calls} calls, A B B A order")
    print(f"per call (medians): without capture {statistics.median(plain) * 1e6:.1f} us, "
          f"with capture {statistics.median(captured) * 1e6:.1f} us")
    print(f"ratio with/without, median over pairs: {statistics.median(ratios):.4f} (target <= 1.02); "
          f"quartiles {statistics.quantiles(ratios, n=4)[0]:.4f} .. {statistics.quantiles(ratios, n=4)[2]:.4f}")
    print(f"dispatch events recorded: {sum(e['type'] == 'dispatch' for e in sink.events)} of {pairs * calls}")


if __name__ == "__main__":
    main()
