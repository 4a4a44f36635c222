"""Program mode's reliability and cost, measured in one run (synthetic kernel family, CPU):
1. 8 spawned processes x 10 000 dispatches: the dispatches the report counts, and the trace's size.
2. the same with worker 3 SIGKILLed half-way: what the report says of it ("at least N").
3. one process x 100 000 dispatches of one variant: trace size (target well under 64 KB) and the
   microseconds mlacheck adds per dispatch (dispatch loop with vs without, A B B A).
4. observed start-up: `python -c pass` with the agent vs without (target: <= 30 ms added), A B B A.
Usage (from the repository root): python tests/benchmarks/bench_program_mode.py
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "tests" / "fixtures" / "synthetic.toml"
PROGRAM = ROOT / "tests" / "fixtures" / "programs" / "dispatch_loop.py"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def observed(run_dir: Path, *args: str) -> str:
    command = [
        sys.executable,
        "-m",
        "mlacheck",
        "run",
        "--rules",
        str(RULES),
        "--run-dir",
        str(run_dir),
        "--allow-incomplete",
        "--",
        sys.executable,
        str(PROGRAM),
        *args,
    ]
    return subprocess.run(command, env=ENV, capture_output=True, text=True, cwd=ROOT).stdout


def counted(run_dir: Path) -> dict:
    """The dispatches the report counts over every process, and whether that is "at least"."""
    from mlacheck.program.saved import program_report
    from mlacheck.report.model import ReportPolicy

    [family] = program_report([run_dir], policy=ReportPolicy(allow_incomplete=True)).families
    return {
        "total": sum(v.dispatches for v in family.variants),
        "at_least": any(v.dispatches_at_least for v in family.variants),
    }


def trace_bytes(run_dir: Path) -> int:
    return sum(path.stat().st_size for path in run_dir.glob("trace-*.jsonl"))


def loop_seconds(output: str) -> float:
    line = next(line for line in output.splitlines() if line.startswith("loop_seconds"))
    return sum(float(value) for value in line.split()[1:])


def startup(folder: Path, pairs: int = 15) -> tuple[float, float]:
    run_dir = folder / "startup"
    observed(run_dir, "1", "1")
    bootstrap = ROOT / "mlacheck" / "program" / "bootstrap"
    plain_env = dict(ENV)
    agent_env = {**ENV, "PYTHONPATH": f"{bootstrap}{os.pathsep}{ROOT}", "MLACHECK_RUN_DIR": str(run_dir)}

    def once(env: dict) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        return time.perf_counter() - started

    plain, agent = [], []
    for _ in range(pairs):
        plain.append(once(plain_env))
        agent += [once(agent_env), once(agent_env)]
        plain.append(once(plain_env))
    return statistics.median(plain), statistics.median(agent)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        observed(folder / "all", "8", "10000")
        seen = counted(folder / "all")
        print(
            f"8 x 10000 dispatches: the report counts {seen['total']} of 80000 "
            f"({'at least' if seen['at_least'] else 'exact'}); trace {trace_bytes(folder / 'all')} bytes in all"
        )
        observed(folder / "kill", "8", "10000", "3")
        killed = counted(folder / "kill")
        print(
            f"same, rank 3 SIGKILLed at its dispatch 5000: the report counts {killed['total']} of 75000 made "
            f"({'at least' if killed['at_least'] else 'exact'})"
        )
        plain, instrumented = [], []
        for number in range(4):  # A B B A
            if number in (0, 3):
                plain.append(
                    loop_seconds(
                        subprocess.run(
                            [sys.executable, str(PROGRAM), "1", "100000"],
                            env=ENV,
                            capture_output=True,
                            text=True,
                            cwd=ROOT,
                        ).stdout
                    )
                )
            else:
                instrumented.append(loop_seconds(observed(folder / f"cost{number}", "1", "100000")))
        size = trace_bytes(folder / "cost1")
        a, b = statistics.mean(plain), statistics.mean(instrumented)
        print(
            f"100000 dispatches of one variant: trace {size} bytes (target well under 65536); loop {a:.3f} s without, "
            f"{b:.3f} s with mlacheck: +{(b - a) / 100000 * 1e6:.2f} us per dispatch"
        )
        without, with_agent = startup(folder)
        print(
            f"start-up of `python -c pass`: {without * 1e3:.1f} ms without, {with_agent * 1e3:.1f} ms with the agent: "
            f"+{(with_agent - without) * 1e3:.1f} ms (target <= 30 ms)"
        )


if __name__ == "__main__":
    main()
