"""Wall time of the default `mlacheck run`, measured in one run against its floors (A B B A where it pays).

Prints:
- `--compile skip` against the naive floor `python -c 'import torch, tokenspeed_mla.mla_prefill'` (target: skip
  at or below it: the CLI skips the interpreter's teardown and the collections during its imports);
- `--compile real` against its floor, the sum of its own compile times plus that import (target: real <= 1.15 x
  floor + 5 s).
Usage: python tests/benchmarks/bench_default_run.py [pairs] [extra `mlacheck run` options]
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAIVE = [sys.executable, "-c", "import torch, tokenspeed_mla.mla_prefill"]


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=False, capture_output=True)
    return time.perf_counter() - started


def run(policy: str, extra: list[str], folder: Path) -> tuple[float, dict]:
    path = folder / f"{policy}.json"
    seconds = timed([sys.executable, "-m", "mlacheck", "run", "--compile", policy, "--json", str(path), *extra])
    return seconds, json.loads(path.read_text())


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    extra = sys.argv[2:]
    with tempfile.TemporaryDirectory() as folder:
        naive, skip = [], []
        for number in range(pairs):  # A B B A
            if number % 2 == 0:
                naive.append(timed(NAIVE))
                skip.append(run("skip", extra, Path(folder))[0])
            else:
                skip.append(run("skip", extra, Path(folder))[0])
                naive.append(timed(NAIVE))
        real_s, report = run("real", extra, Path(folder))
    compiles = [v.get("compile_s") or 0.0 for f in report["families"] for v in f["variants"]]
    compiles += [v.get("serving_path_compile_s") or 0.0 for f in report["families"] for v in f["variants"]]
    floor = sum(compiles) + statistics.median(naive)
    print(f"mode={report['mode']} target={report['target_arch']} variants compiled={sum(c > 0 for c in compiles)}")
    print(
        f"--compile skip: {statistics.median(skip):.2f} s vs `import torch, tokenspeed_mla.mla_prefill` "
        f"{statistics.median(naive):.2f} s (medians of {pairs}, A B B A): ratio {statistics.median(skip) / statistics.median(naive):.3f} "
        "(target <= 1)"
    )
    print(
        f"--compile real: {real_s:.2f} s vs floor {floor:.2f} s (compiles {sum(compiles):.2f} s + import); "
        f"limit 1.15 x floor + 5 s = {1.15 * floor + 5:.2f} s -> {'met' if real_s <= 1.15 * floor + 5 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
