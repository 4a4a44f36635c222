"""Host time per call on a hit, with issue 28's watchers installed vs not, in one process (A B B A turns, one run):
- deep_gemm: sgl-deep-gemm 0.2.5's published `fp8_gemm_nt` on a variant already dispatched on the serving path; on
  a CUDA device its real extension (host time of a launch: DeepGEMM's C++ heuristics and the launch), on a CPU its
  extension stood in (tests/fixtures/deep_gemm_extension.py: a torch operator with a Python body, so the denominator
  is the stand-in's cost); the arms differ in the family's capture (the observed `_C` and the dispatch wrappers). And
  `get_mn_major_tma_aligned_tensor` (a layout kernel's operation, netted, not keyed) after its first call.
- flashinfer: a FlashInfer module getter that hit its functools cache (flashinfer.norm.get_norm_module), with the
  compile nets of jit_compile_nets.toml installed vs not (a hit never reaches a net: what they cost there).
The arms take turns in A B B A order, 50 timed calls each after 10 untimed; a turn's figure is the ratio of its
medians, the run's the median of the turns'. Target: <= 1.02 per call (issue 28 item 5). DeepGEMM's figure says whether
the key's tensor fields were read below Python (capture/tensor_fields.py: on where verified) and comes with the same
call with each tensor argument's dtype, shape and strides read through Python instead (torch's getters and `stride()`
through attrgetter and methodcaller), measured the same way: what reading them through Python costs.
Usage: python tests/benchmarks/bench_jit_watchers.py [deep_gemm|flashinfer|all] [calls per arm (10000)] [module]
sgl-deep-gemm comes from MLACHECK_DEEP_GEMM_SITE, else is installed (--no-deps) into ~/.cache/mlacheck-tests; module
vllm.third_party.deep_gemm is vLLM's vendored copy, from MLACHECK_VLLM_DEEP_GEMM_SITE.
"""

from __future__ import annotations

import collections
import gc
import importlib.util
import operator
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN, SETTLE, TARGET = 50, 10, 1.02


def deep_gemm_site() -> str:
    site = os.environ.get("MLACHECK_DEEP_GEMM_SITE") or str(
        Path.home() / ".cache" / "mlacheck-tests" / "deep-gemm-site"
    )
    if not (Path(site) / "deep_gemm").exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, "sgl-deep-gemm==0.2.5"],
            check=True,
        )
    return site


def arms(install, package: str):
    """Install; the program's objects and the capture's, for every module attribute the install replaced."""

    def attributes():
        return {
            (name, attribute): value
            for name, module in list(sys.modules.items())
            if module is not None
            and (name == package or name.startswith(package + "."))
            and hasattr(module, "__dict__")
            for attribute, value in vars(module).items()
        }

    before = attributes()
    install()
    after = attributes()
    changed = [place for place, value in after.items() if place in before and before[place] is not value]
    return [(*p, before[p]) for p in changed], [(*p, after[p]) for p in changed]


def put(arm) -> None:
    for name, attribute, value in arm:
        setattr(sys.modules[name], attribute, value)


def timed(one_call, calls: int, plain, captured, put=put) -> dict:
    """`calls` timed calls per arm, in A B B A turns; `put` puts an arm in place."""
    times = {False: [], True: []}
    clock = time.perf_counter_ns
    for arm in (plain, captured):
        put(arm)
        for _ in range(100):
            one_call()
    gc.collect()
    gc.disable()
    try:
        for _ in range(calls // (2 * RUN)):
            for instrumented in (False, True, True, False):
                put(captured if instrumented else plain)
                for _ in range(SETTLE):
                    one_call()
                for _ in range(RUN):
                    started = clock()
                    one_call()
                    times[instrumented].append(clock() - started)
    finally:
        gc.enable()
    block = 2 * RUN
    turns = [
        (statistics.median(times[False][i : i + block]), statistics.median(times[True][i : i + block]))
        for i in range(0, len(times[False]), block)
    ]
    return {
        "without_us": statistics.median(times[False]) / 1e3,
        "added_us": statistics.median(w - wo for wo, w in turns) / 1e3,
        "ratio": statistics.median(w / wo for wo, w in turns),
    }


FAMILIES = {"deep_gemm": "deep_gemm.gemm", "vllm.third_party.deep_gemm": "vllm.deep_gemm"}  # module -> its family


def deep_gemm_figures(calls: int, module: str = "deep_gemm") -> dict:
    import torch

    site = deep_gemm_site() if module == "deep_gemm" else os.environ["MLACHECK_VLLM_DEEP_GEMM_SITE"]
    sys.path[:0] = [site, str(ROOT / "tests" / "fixtures")]
    if not torch.cuda.is_available():  # on a CPU the native extension is stood in; on a device it runs
        import deep_gemm_extension

        deep_gemm_extension.install()
    os.environ.setdefault("DG_JIT_CACHE_DIR", str(Path.home() / ".cache" / "mlacheck-tests" / "bench-dg"))
    deep_gemm = importlib.import_module(module)

    from mlacheck.capture import FamilyCapture, tensor_fields
    from mlacheck.rulefiles import load_rules
    from mlacheck.sinks import MemorySink

    rule = load_rules().family(FAMILIES[module])
    capture = FamilyCapture(rule, MemorySink())
    if torch.cuda.is_available():
        utils = importlib.import_module(module + ".utils")
        per_block_cast_to_fp8, per_token_cast_to_fp8 = utils.per_block_cast_to_fp8, utils.per_token_cast_to_fp8

        ue8m0 = torch.cuda.get_device_capability()[0] >= 10
        lhs = per_token_cast_to_fp8(torch.randn(64, 7168, device="cuda", dtype=torch.bfloat16), use_ue8m0=ue8m0)
        rhs = per_block_cast_to_fp8(torch.randn(2112, 7168, device="cuda", dtype=torch.bfloat16), use_ue8m0=ue8m0)
        out = torch.empty(64, 2112, device="cuda", dtype=torch.bfloat16)
    else:
        lhs = (torch.empty(64, 7168, dtype=torch.float8_e4m3fn), torch.ones(64, 56))
        rhs = (torch.empty(2112, 7168, dtype=torch.float8_e4m3fn), torch.ones(17, 56))
        out = torch.empty(64, 2112, dtype=torch.bfloat16)

    scales = lhs[1][:, :48].contiguous()  # a layout kernel's input (SM90 scale factors, 48 of them a row)

    def one_call():
        deep_gemm.fp8_gemm_nt(lhs, rhs, out)

    def one_layout():  # netted, not keyed (capture/caches/jit_net.py)
        deep_gemm.get_mn_major_tma_aligned_tensor(scales)

    plain, captured = arms(capture.install, module)
    capture.serving_started()
    put(captured)
    one_call()  # the serving dispatch that makes the variant a hit
    one_layout()  # and the layout kernel's first call, after which its key is served on the hot path
    try:
        figures = timed(one_call, calls, plain, captured)
        layout = timed(one_layout, calls, plain, captured)
    finally:
        put(captured)
        capture.remove()
    put(plain)
    figures["floor"] = floor(one_call, calls, (*lhs, *rhs, out))
    figures["native"] = tensor_fields.read_natively()
    return {f"{module} fp8_gemm_nt hit": figures, f"{module} get_mn_major_tma_aligned_tensor, netted": layout}


def floor(one_call, calls: int, tensors: tuple) -> dict:
    """What reading the key's tensor fields from Python costs the same call (each tensor's dtype, shape and strides,
    through operator.attrgetter and methodcaller: torch's getters and `stride()`, which no key that holds them avoids,
    plus those calls and attribute lookup), in the same A B B A turns."""
    fields, strides, reading = operator.attrgetter("dtype", "shape"), operator.methodcaller("stride"), [False]

    def call_and_read():
        one_call()
        if reading[0]:
            collections.deque(map(fields, tensors), 0)
            collections.deque(map(strides, tensors), 0)

    return timed(call_and_read, calls, False, True, put=lambda arm: reading.__setitem__(0, arm))


def flashinfer_figures(calls: int) -> dict:
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    import flashinfer.jit.core as core
    import flashinfer.jit.cute_dsl_core as cute_dsl_core
    from flashinfer.norm import get_norm_module

    from mlacheck.capture.watch import compile_nets
    from mlacheck.rulefiles import load_rules
    from mlacheck.sinks import MemorySink

    core.run_ninja = lambda *args, **kwargs: None
    core.JitSpecNvcc.load = lambda self, so_path=None: object()
    nets = [net for net in load_rules().compile_nets if net.module.startswith("flashinfer")]
    captures = compile_nets(nets, MemorySink())
    get_norm_module()  # built once: every later call is a hit of its functools cache

    classes = (core.JitSpecNvcc, cute_dsl_core.JitSpecCuteDsl)
    before = {cls: vars(cls)["build"] for cls in classes}
    for capture in captures:
        capture.install(sys.modules[capture.net.module])
    after = {cls: vars(cls)["build"] for cls in classes}

    def put_builds(arm):
        for cls, build in arm.items():
            cls.build = build

    try:
        times = timed(get_norm_module, calls, before, after, put_builds)
    finally:
        put_builds(after)
        for capture in captures:
            capture.remove()
    return times


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    figures = {}
    if which in ("deep_gemm", "all"):
        figures.update(deep_gemm_figures(calls, *sys.argv[3:4]))
    if which in ("flashinfer", "all"):
        if importlib.util.find_spec("flashinfer") is None:
            print("flashinfer getter hit, compile nets: not measured (flashinfer is not installed here)")
        else:
            figures["flashinfer getter hit, compile nets"] = flashinfer_figures(calls)
    for name, figure in figures.items():
        verdict = "met" if figure["ratio"] <= TARGET else "missed"
        print(
            f"{name}: {figure['without_us']:.2f} us without, +{figure['added_us']:.2f} us with, ratio "
            f"{figure['ratio']:.4f} (target <= {TARGET}): {verdict}"
        )
        if "floor" in figure:
            print(
                f"  the key's tensor fields read {'below Python' if figure['native'] else 'through Python'} "
                f"(capture/tensor_fields.py); reading them through Python alone instead: "
                f"+{figure['floor']['added_us']:.2f} us, ratio {figure['floor']['ratio']:.4f} (torch's getters and "
                "stride(), plus attrgetter's and methodcaller's calls)"
            )


if __name__ == "__main__":
    main()
