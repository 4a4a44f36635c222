"""Program-mode reliability and cost, measured in one run (synthetic kernel family, CPU):
1. 8 spawned processes x 10 000 dispatches: dispatch events written (by design one per dispatch) vs read back.
2. the same with worker 3 SIGKILLed half-way: its events up to the kill are all there.
3. one process x 100 000 dispatches with and without mlacheck: the dispatch loop's time as a ratio, and
   the microseconds mlacheck adds per dispatch.
Usage (from the repository root): python tests/benchmarks/bench_program_mode.py
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "tests" / "fixtures" / "synthetic.toml"
PROGRAM = ROOT / "tests" / "fixtures" / "programs" / "dispatch_loop.py"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def observed(run_dir: Path, *args: str) -> str:
    command = [sys.executable, "-m", "mlacheck", "run", "--rules", str(RULES), "--run-dir", str(run_dir), "--",
               sys.executable, str(PROGRAM), *args]
    return subprocess.run(command, env=ENV, capture_output=True, text=True, cwd=ROOT).stdout


def dispatch_events(run_dir: Path) -> dict[int, int]:
    from mlacheck.program.runs import load_runs

    loaded = load_runs([run_dir])
    counts = {}
    for event in loaded.events:
        if event["type"] == "dispatch":
            rank = loaded.processes[event["proc"]]["rank"]
            counts[rank] = counts.get(rank, 0) + 1
    return counts


def loop_seconds(output: str) -> float:
    line = next(line for line in output.splitlines() if line.startswith("loop_seconds"))
    return sum(float(value) for value in line.split()[1:])


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        observed(folder / "all", "8", "10000")
        counts = dispatch_events(folder / "all")
        print(f"8 x 10000 dispatches: written {8 * 10000}, read {sum(counts.values())} "
              f"(per rank: {sorted(counts.items())})")
        observed(folder / "kill", "8", "10000", "3")
        counts = dispatch_events(folder / "kill")
        print(f"same, rank 3 SIGKILLed at its dispatch 5000: rank 3 read {counts.get(3)} of 5000 written; "
              f"others read {sum(v for k, v in counts.items() if k != 3)} of {7 * 10000}")
        plain = loop_seconds(subprocess.run([sys.executable, str(PROGRAM), "1", "100000"], env=ENV, capture_output=True,
                                            text=True, cwd=ROOT).stdout)
        with_mlacheck = loop_seconds(observed(folder / "cost", "1", "100000"))
        print(f"100000 dispatches: loop {plain:.3f} s without, {with_mlacheck:.3f} s with mlacheck: ratio "
              f"{with_mlacheck / plain:.2f}, +{(with_mlacheck - plain) / 100000 * 1e6:.2f} us per dispatch "
              f"(a tokenspeed_mla_prefill dispatch costs about 100 us of host time on the H200)")


if __name__ == "__main__":
    main()
