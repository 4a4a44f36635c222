"""A DeepGEMM hit's host time on a CUDA device, plain vs observed (issue 28 item 5, target <= 1.02 a call): the fixture
program tests/fixtures/programs/deep_gemm_gpu.py times DG_GPU_HITS calls of `fp8_gemm_nt` at a built M (DeepGEMM's
real extension: its C++ heuristics, the kernel-cache lookup and the launch), run plain and under `mlacheck run` in
A B B A order ROUNDS times, one warm DG_JIT_CACHE_DIR for all (the first run builds the kernels), each program on one
CPU of its own (the last; DG_GPU_CPU). Each run gives its median; the figure is the observed medians' mean over the
plain ones', and beside it the median of the observed runs over that of the plain ones (a run's median came out at
one of two levels, about 37 or 54 us, on the H100 on 2026-12-05: the mean follows how many runs drew each).
Usage: python tests/benchmarks/bench_deep_gemm_gpu.py [module (deep_gemm)] [calls (4000)]
(vLLM's vendored copy: module vllm.third_party.deep_gemm with MLACHECK_VLLM_DEEP_GEMM_SITE on the PYTHONPATH.)"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "fixtures" / "programs" / "deep_gemm_gpu.py"
TARGET = 1.02
ROUNDS = 4


def hit_us(observed: bool, module: str, calls: int, folder: Path) -> float:
    site = os.environ.get("MLACHECK_VLLM_DEEP_GEMM_SITE", "/tmp/vllm-deep-gemm-site")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [site, str(ROOT), os.environ.get("PYTHONPATH")])),
        "DG_GPU_MODULE": module, "DG_JIT_CACHE_DIR": str(folder / "dg"), "DG_GPU_WARMUP": "16",
        "DG_GPU_SERVE": "16", "DG_GPU_HITS": str(calls), "DG_GPU_CPU": str(max(os.sched_getaffinity(0))),
    }  # fmt: skip
    command = [sys.executable, str(PROGRAM)]
    if observed:
        run_dir = folder / f"run-{len(list(folder.glob('run-*')))}"
        command = [sys.executable, "-m", "mlacheck", "run", "-q", "--run-dir", str(run_dir), "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    line = next((line for line in done.stdout.splitlines() if line.startswith("DEEP_GEMM_FIGURES ")), None)
    if line is None:
        sys.exit(f"the program printed no figures (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    return json.loads(line.partition(" ")[2])["hit_us"]


def main() -> None:
    module = sys.argv[1] if len(sys.argv) > 1 else "deep_gemm"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    folder = Path(tempfile.mkdtemp(prefix="bench-deep-gemm-"))
    try:
        hit_us(False, module, 64, folder)  # builds the kernel into the shared cache
        turns = [
            (observed, hit_us(observed, module, calls, folder)) for observed in (False, True, True, False) * ROUNDS
        ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    plain = [us for observed, us in turns if not observed]
    watched = [us for observed, us in turns if observed]
    ratio = sum(watched) / sum(plain)
    print(f"{module} hit, host time a call (A B B A x{ROUNDS}): plain {plain} us, observed {watched} us")
    print(f"ratio {ratio:.4f} (+{(sum(watched) - sum(plain)) / len(plain):.2f} us), target <= {TARGET}:", end=" ")
    print("met" if ratio <= TARGET else "MISSED", end="; ")
    print(f"medians' ratio {statistics.median(watched) / statistics.median(plain):.4f}")


if __name__ == "__main__":
    main()
