"""Program mode's reliability and cost, measured in one run (synthetic kernel family, CPU):
1. 8 spawned processes x 10 000 dispatches: the dispatches the report counts, and the trace's size.
2. the same with worker 3 SIGKILLed half-way: what the report says of it ("at least N").
3. one process x 100 000 dispatches of one variant: trace size (target well under 64 KB) and the
   microseconds mlacheck adds per dispatch (dispatch loop with vs without, A B B A).
4. observed start-up: `python -c pass` with the agent vs without (target: <= 30 ms added), by each start path
   (mlacheck's .pth, the bootstrap on PYTHONPATH, the registry for a cleared environment), A B C D D C B A.
5. mlacheck's .pth where no run is active for the process: the cost of its line, and start-up with another run
   registered on the machine vs none (A B B A).
Usage (from the repository root): python tests/benchmarks/bench_program_mode.py
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlacheck.program import registry

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
    from mlacheck.report.policy import ReportPolicy

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


def startup(folder: Path, turns: int = 15) -> dict[str, float]:
    """Median `python -c pass` start-up per arm, the arms in A B C D D C B A turns: A no run (mlacheck's .pth installed,
    inert); B the agent started by the .pth (MLACHECK_RUN_DIR set, no bootstrap on PYTHONPATH); C the same with the
    bootstrap on PYTHONPATH too (what `mlacheck run` gives a process: the .pth starts the agent first); D a cleared
    environment, the agent started through the registry (this process registered as the run's root)."""
    run_dir = folder / "startup"
    observed(run_dir, "1", "1")
    bootstrap = ROOT / "mlacheck" / "program" / "bootstrap"
    arms = {
        "A": dict(ENV),
        "B": {**ENV, "MLACHECK_RUN_DIR": str(run_dir)},
        "C": {**ENV, "PYTHONPATH": f"{bootstrap}{os.pathsep}{ROOT}", "MLACHECK_RUN_DIR": str(run_dir)},
        "D": {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
    }
    times: dict[str, list[float]] = {name: [] for name in arms}

    def once(name: str) -> None:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=arms[name], check=True)
        times[name].append(time.perf_counter() - started)

    before = len(list(run_dir.glob("trace-*.jsonl")))
    entry = None
    for _ in range(turns):
        for name in "ABCDDCBA":
            if name == "D" and entry is None:
                entry = registry.register(os.getpid(), str(run_dir))
            elif name != "D" and entry is not None:
                registry.unregister(entry)
                entry = None
            once(name)
    if entry is not None:
        registry.unregister(entry)
    traces = len(list(run_dir.glob("trace-*.jsonl"))) - before
    assert traces == 6 * turns, f"{traces} traces of {6 * turns}: an arm with the agent did not start it"
    return {name: statistics.median(values) for name, values in times.items()}


def inert_pth(turns: int = 30) -> tuple[float, float]:
    """What mlacheck's .pth line costs a process that no run is active for: microseconds per execution of the line with
    no run registered on the machine, and the process start-up with a run registered that the process does not
    descend from (the line imports autostart and walks up /proc) minus with none (A B B A, ms)."""
    line = next(line for line in (ROOT / "mlacheck-startup.pth").read_text().splitlines() if line.startswith("import"))
    env = {name: value for name, value in os.environ.items() if name != "MLACHECK_RUN_DIR"}
    repeated = f"import timeit; print(timeit.timeit({line!r}, number=20000) / 20000 * 1e6)"
    assert not os.path.isdir(registry.registry_dir()), "a run is registered on this machine: stop it first"
    none = float(subprocess.run([sys.executable, "-c", repeated], env=env, capture_output=True, text=True).stdout)
    outsider = subprocess.Popen(["sleep", "600"])  # a root that this benchmark's processes do not descend from
    entry = registry.register(outsider.pid, "/nonexistent")
    try:
        registered, plain = [], []
        for _ in range(turns):
            for arm in "ABBA":
                if arm == "B" and not os.path.exists(entry):
                    entry = registry.register(outsider.pid, "/nonexistent")
                elif arm == "A" and os.path.exists(entry):
                    registry.unregister(entry)
                started = time.perf_counter()
                subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
                (registered if arm == "B" else plain).append(time.perf_counter() - started)
    finally:
        registry.unregister(entry)
        outsider.kill()
        outsider.wait()
    return none, (statistics.median(registered) - statistics.median(plain)) * 1e3


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
        arms = startup(folder)
        base = arms["A"]
        print(
            f"start-up of `python -c pass` (medians, A B C D D C B A): {base * 1e3:.1f} ms with no run; the agent "
            f"added +{(arms['B'] - base) * 1e3:.1f} ms started by the .pth (MLACHECK_RUN_DIR), "
            f"+{(arms['C'] - base) * 1e3:.1f} ms with the bootstrap on PYTHONPATH too, "
            f"+{(arms['D'] - base) * 1e3:.1f} ms found through the registry (cleared environment) (target <= 30 ms)"
        )
        none, elsewhere = inert_pth()
        print(
            f"mlacheck's .pth where no run is active for the process: {none:.2f} us a start with no run on the "
            f"machine; with another run registered (importing autostart, the walk up /proc) the start-up of "
            f"`python -c pass` {elsewhere:+.2f} ms (A B B A)"
        )


if __name__ == "__main__":
    main()
