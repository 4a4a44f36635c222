"""Host time per tokenspeed_mla_prefill call in trace mode, with mlacheck's capture installed vs not.

Same process, same tensors, interleaved blocks; the launch is a no-op in both (the device cannot run
sm_100a): without capture a no-op sits in the library's cache, with capture the Launcher stands in.
Target: ratio <= 1.02. Needs a CUDA device. Usage: python benchmarks/bench_dispatch_overhead.py [calls]
"""

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
from mlacheck.scenario.dispatch import FP8, dispatch  # noqa: E402
from mlacheck.scenario.prefill_run import Launcher  # noqa: E402
from mlacheck.scenario.presets import model_preset  # noqa: E402
from mlacheck.scenario.traffic import PrefillCall  # noqa: E402
from tokenspeed_mla import mla_prefill  # noqa: E402


def block(call, tensors, model, calls: int) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        dispatch(tokenspeed_mla.tokenspeed_mla_prefill, call, tensors, model, True, dry=False)
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / calls


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    model = model_preset("deepseek-v3")
    call = PrefillCall("extend", True, True, (512, 1024), (512, 1024), (0, 0))
    from mlacheck.scenario.dispatch import empty_tensors

    tensors = empty_tensors(call, model, "cuda")
    key = (FP8, model.d_qk, model.d_v, True, True, True, mla_prefill._enable_ex2_emulation())
    mla_prefill._compiled_kernels[key] = lambda *args: None  # precompiled no-op launch
    [rule] = load_rules()
    sink = MemorySink()
    capture = FamilyCapture(rule.family, sink, "real", Launcher(execute=False).stand_in)
    block(call, tensors, model, 200)  # warm
    plain, instrumented = [], []
    for _ in range(10):
        plain.append(block(call, tensors, model, calls // 10))
        capture.install()
        instrumented.append(block(call, tensors, model, calls // 10))
        capture.remove()
    a, b = statistics.median(plain), statistics.median(instrumented)
    print(f"{torch.cuda.get_device_name()}: {calls} calls each way, 10 interleaved blocks")
    print(f"per call: without capture {a * 1e6:.1f} us, with capture {b * 1e6:.1f} us; ratio {b / a:.4f} (target <= 1.02)")
    print(f"dispatch events recorded: {sum(e['type'] == 'dispatch' for e in sink.events)}")


if __name__ == "__main__":
    main()
