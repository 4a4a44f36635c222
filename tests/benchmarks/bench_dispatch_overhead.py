"""Host time per tokenspeed_mla dispatch with mlacheck's capture installed vs not, in one process.

The two arms differ in the capture alone: both look up a precompiled no-op launch (prefill: in the cache dict;
decode: from a functools.cache function with the real one's signature), both run every call inside the same
stand-ins for what the target GPU would answer (`mlacheck.capture.dry`: host cum_seq_lens, capability, SM
count, a null CUDA stream context), and the capture arm's launch policy is left alone. Blocks alternate
A B B A so that drift favours neither arm; the figure is the median over block pairs of (with / without).
Each block's first call is timed apart: after install it is the capture's slow path (stack read, events),
paid once per variant and process, not per dispatch.
Targets: prefill <= 1.005, decode <= 1.02, and <= 0.5 us added per lookup.
On a CUDA device it runs in trace mode; without one, in dry mode on the CPU.
Usage: python tests/benchmarks/bench_dispatch_overhead.py [prefill|decode] [pairs] [calls per block]
"""

import dataclasses
import functools
import gc
import os
import statistics
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_100a")

import torch  # noqa: E402

import tokenspeed_mla  # noqa: E402
from mlacheck.capture import CapturePolicy, FamilyCapture  # noqa: E402
from mlacheck.capture.dry import DryStandIns  # noqa: E402
from mlacheck.events import MemorySink  # noqa: E402
from mlacheck.rules import load_rules  # noqa: E402
from mlacheck.scenario.decode_run import DecodeRunner  # noqa: E402
from mlacheck.scenario.decode_traffic import DecodeStep  # noqa: E402
from mlacheck.scenario.dispatch import FP8, dispatch, empty_tensors  # noqa: E402
from mlacheck.scenario.prefill_run import Launcher  # noqa: E402
from mlacheck.scenario.presets import model_preset  # noqa: E402
from mlacheck.scenario.traffic import PrefillCall  # noqa: E402
from tokenspeed_mla import mla_decode, mla_prefill  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
MODEL = model_preset("deepseek-v3")


def noop(*args, **kwargs):
    return None


def prefill_call(stand_ins: DryStandIns):
    """A precompiled no-op variant and one call that looks it up (on the CPU, cum_seq_lens that report is_cuda,
    as --dry passes them, so that the dispatch keeps them where they are)."""
    call = PrefillCall("extend", True, True, (512, 1024), (512, 1024), (0, 0))
    tensors = empty_tensors(call, MODEL, DEVICE)
    tensors = dataclasses.replace(tensors, cum_q=stand_ins.host_tensor(tensors.cum_q), cum_kv=stand_ins.host_tensor(tensors.cum_kv))
    key = (FP8, MODEL.d_qk, MODEL.d_v, True, True, True, mla_prefill._enable_ex2_emulation())
    mla_prefill._compiled_kernels[key] = noop
    return lambda: dispatch(tokenspeed_mla.tokenspeed_mla_prefill, call, tensors, MODEL, True)


def decode_call():
    """The decode cache replaced by a functools.cache of a no-op with the real signature; one call that hits it."""
    original = mla_decode._get_compiled_mla_kernel

    @functools.wraps(original)
    def no_compile(*args, **kwargs):
        return noop

    mla_decode._get_compiled_mla_kernel = functools.cache(no_compile)
    runner = DecodeRunner(tokenspeed_mla, MODEL, True, "dry", Launcher(execute=False), MemorySink(), "decode", DEVICE)
    step = DecodeStep("serving", 8, 4096, (1000,) * 8)
    inputs = runner.inputs(step, 0)
    if DEVICE == "cuda":
        inputs = type(inputs)(*(t.to(DEVICE) if isinstance(t, torch.Tensor) else t for t in vars(inputs).values()))
    return lambda: runner.dispatch(inputs, step.max_seq_len)


def main() -> None:
    kernel = sys.argv[1] if len(sys.argv) > 1 else "prefill"
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    rule = load_rules().family(f"tokenspeed_mla.{kernel}")
    policy = CapturePolicy(compile="real", target_arch="sm_100a", num_sms=148)
    stand_ins = DryStandIns(load_rules().capture_spec_of(rule.family.name).dry_patches, (), policy)
    one_call = prefill_call(stand_ins) if kernel == "prefill" else decode_call()

    firsts: dict[bool, list[float]] = {False: [], True: []}

    def block(instrumented: bool = False) -> float:
        gc.collect()  # a collection triggered by set-up (install, remove) must not land in a timed block
        with stand_ins.around_call():
            started = time.perf_counter()
            one_call()  # timed apart: a variant's first dispatch after install is the capture's slow path, once per process
            firsts[instrumented].append(time.perf_counter() - started)
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(calls):
                one_call()
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            return (time.perf_counter() - started) / calls

    sink = MemorySink()
    capture = FamilyCapture(load_rules().capture_spec_of(rule.family.name), sink, policy)

    def captured() -> float:
        capture.install()
        try:
            return block(instrumented=True)
        finally:
            capture.remove()

    block(), captured()  # warm both arms
    plain, instrumented, ratios = [], [], []
    for number in range(pairs):
        first, second = (block(), captured()) if number % 2 == 0 else reversed([captured(), block()])
        plain.append(first)
        instrumented.append(second)
        ratios.append(second / first)
    where = f"trace mode, {torch.cuda.get_device_name()}" if DEVICE == "cuda" else "dry mode, CPU"
    quartiles = statistics.quantiles(ratios, n=4)
    print(f"{kernel}, {where}: {pairs} block pairs x {calls} calls, A B B A order")
    print(f"per call (medians): without capture {statistics.median(plain) * 1e6:.2f} us, "
          f"with capture {statistics.median(instrumented) * 1e6:.2f} us: "
          f"{(statistics.median(instrumented) - statistics.median(plain)) * 1e6:+.2f} us per lookup")
    print(f"ratio with/without, median over pairs: {statistics.median(ratios):.4f}; quartiles {quartiles[0]:.4f} .. "
          f"{quartiles[2]:.4f}")
    print(f"fastest block (noise only adds): without {min(plain) * 1e6:.2f} us, with {min(instrumented) * 1e6:.2f} us: "
          f"{(min(instrumented) - min(plain)) * 1e6:+.2f} us per lookup")
    print(f"first dispatch of a variant (medians, timed apart): {statistics.median(firsts[False]) * 1e6:.1f} us without, "
          f"{statistics.median(firsts[True]) * 1e6:.1f} us with capture")
    print(f"events written: {len(sink.events)} (the first dispatch of the variant in each block, and its counts)")


if __name__ == "__main__":
    main()
