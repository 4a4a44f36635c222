"""Wall time of the default `mlacheck run` with --compile skip and --compile real, measured in one run.

Prints: skip vs real (target: skip <= 0.2 x real) and real vs its floor, the sum of its own compile
times plus the import of torch + tokenspeed_mla + mlacheck (target: real <= 1.15 x floor + 5 s).
Usage: python tests/benchmarks/bench_default_run.py [extra `mlacheck run` options]
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMPORT = "import torch, mlacheck.cli, mlacheck.scenario.check, tokenspeed_mla.mla_prefill"


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=False, capture_output=True)
    return time.perf_counter() - started


def run(policy: str, extra: list[str], folder: Path) -> tuple[float, dict]:
    path = folder / f"{policy}.json"
    seconds = timed([sys.executable, "-m", "mlacheck", "run", "--compile", policy, "--json", str(path), *extra])
    return seconds, json.loads(path.read_text())


def main() -> None:
    extra = sys.argv[1:]
    with tempfile.TemporaryDirectory() as folder:
        import_s = timed([sys.executable, "-c", IMPORT])
        skip_s, _ = run("skip", extra, Path(folder))
        real_s, report = run("real", extra, Path(folder))
    compiles = [v.get("compile_s") or 0.0 for f in report["families"] for v in f["variants"]]
    compiles += [v.get("serving_path_compile_s") or 0.0 for f in report["families"] for v in f["variants"]]
    floor = sum(compiles) + import_s
    print(f"mode={report['mode']} target={report['target_arch']} variants compiled={sum(c > 0 for c in compiles)}")
    print(f"import (torch + tokenspeed_mla + mlacheck): {import_s:.2f} s; compile total: {sum(compiles):.2f} s")
    print(f"--compile skip: {skip_s:.2f} s   --compile real: {real_s:.2f} s   ratio skip/real = {skip_s / real_s:.3f} (target <= 0.2)")
    print(f"real vs floor: {real_s:.2f} s vs {floor:.2f} s; ratio = {real_s / floor:.3f}; "
          f"limit 1.15 x floor + 5 s = {1.15 * floor + 5:.2f} s -> {'met' if real_s <= 1.15 * floor + 5 else 'MISSED'}")


if __name__ == "__main__":
    main()
