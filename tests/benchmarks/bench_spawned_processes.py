"""64 spawned processes that each import a watched library (issue 29; target: observed wall time <= 1.2x plain),
measured in one run: `mlacheck run --rules R -- python spawned_workers.py 64 AT_ONCE 10000 [triton]` (the whole
command a person waits for: the CLI's start, the program under the supervisor, the report) against the plain
`python spawned_workers.py ...`, in A B B A turns. Each worker is a multiprocessing spawn-context process, as engines
start theirs; it imports the library, warms up 8 variants of the synthetic family, makes 10 000 dispatches and one
compile on the serving path (tests/fixtures/programs/spawned_workers.py). Settings:
- `triton-8`, `triton-64`: each worker imports Triton too (a real watched library: its watcher installs in every
  worker; Triton imports what real libraries import: dataclasses, inspect, importlib.metadata, but not torch), 8
  workers alive at a time, as a pool starts them, and all 64 at once;
- `bare-64`: the synthetic family alone (it imports nothing, so every module mlacheck loads counts: the worst case),
  all 64 at once, as the red-team probe ran it (0.2.0: 17-23 s observed against 1.8-5.5 s plain);
- `tokenspeed-8` (not run unless named: 64 imports of torch take minutes here): each worker imports tokenspeed_mla,
  whose two families the bundled rules watch (their install reads the key functions' source), 8 at a time.
Each turn's ratio is its two observed runs over its two plain ones; the figure is their median, the spread their
range; the same for the CPU time of every process of the command (what other sessions' load on the machine moves
least) and for the program's own wall time (without the CLI's start and the report). Every observed run must hold the evidence: every worker observed and its serving-path compile found (64
MLA001, one a rank), every dispatch counted exactly, nothing incomplete.
Python's bytecode caches are kept in a temporary folder for both arms (PYTHONPYCACHEPREFIX; an installed mlacheck has
its .pyc files), warmed by one run of each arm first.
Usage (from the repository root): python tests/benchmarks/bench_spawned_processes.py [TURNS] [SETTING,...]
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "fixtures" / "programs" / "spawned_workers.py"
SYNTHETIC = ROOT / "tests" / "fixtures" / "synthetic.toml"
BUNDLED = ROOT / "mlacheck" / "rulefiles" / "bundled"
LIBRARIES = {  # the library a worker imports first -> its rule files
    None: [],
    "triton": [BUNDLED / "triton.toml"],
    "tokenspeed_mla": [BUNDLED / "tokenspeed_mla_prefill.toml", BUNDLED / "tokenspeed_mla_decode.toml"],
}
TARGET = 1.2
PROCESSES, DISPATCHES = 64, 10_000
SETTINGS = {  # name -> (workers alive at once, the library each imports first)
    "triton-8": (8, "triton"),
    "triton-64": (64, "triton"),
    "bare-64": (64, None),
    "tokenspeed-8": (8, "tokenspeed_mla"),
}
DEFAULT = ("triton-8", "triton-64", "bare-64")


def program(at_once: int, library: str | None) -> list[str]:
    return [sys.executable, str(PROGRAM), str(PROCESSES), str(at_once), str(DISPATCHES)] + (
        [library] if library else []
    )


def timed(command: list[str], env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, CPU seconds of every process of the command (each reaped by its parent, or by the supervisor)."""
    started, used = time.perf_counter(), cpu_seconds()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.perf_counter() - started, cpu_seconds() - used, done


def cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def plain(at_once: int, library: str | None, env: dict) -> tuple[float, float, float]:
    seconds, cpu, done = timed(program(at_once, library), env)
    assert done.returncode == 0 and f"clean_workers {PROCESSES}" in done.stdout, done.stdout + done.stderr
    return seconds, cpu, program_seconds(done.stdout)


def observed(at_once: int, library: str | None, env: dict, folder: Path, rules: Path) -> tuple[float, float, float]:
    run_dir, report = folder / f"run-{time.monotonic_ns()}", folder / "report.json"
    command = [sys.executable, "-m", "mlacheck", "run", "--rules", str(rules), "--run-dir", str(run_dir)]
    command += ["--json", str(report), "--"] + program(at_once, library)
    seconds, cpu, done = timed(command, env)
    check_evidence(json.loads(report.read_text()), done, library)
    return seconds, cpu, program_seconds(done.stdout)


def check_evidence(report: dict, done: subprocess.CompletedProcess, library: str | None) -> None:
    """Every worker observed, its serving-path compile found, every dispatch counted exactly, nothing incomplete (but
    tokenspeed_mla's families, imported and never dispatched, where the report says so)."""
    assert done.returncode == 1 and report["verdict"] == "fail", done.stdout[-2000:] + done.stderr[-2000:]
    assert report["program"]["exit_code"] == 0 and f"clean_workers {PROCESSES}" in done.stdout
    workers = [p for p in report["processes"] if "--multiprocessing-fork" in p["argv"]]
    assert len(workers) == PROCESSES and all(p["exited"] and not p["truncated"] for p in workers), workers
    if library == "tokenspeed_mla":  # imported, never dispatched: where the report says so, that is all it says
        undispatched = [line for line in report["incomplete"] if "no dispatch call reached the cache lookup" in line]
        report = {**report, "incomplete": [line for line in report["incomplete"] if line not in undispatched]}
    lost = {what: report[what] for what in ("incomplete", "internal_errors", "bad_lines") if report[what]}
    assert not lost, json.dumps(lost)[:4000]
    stalls = [f for f in report["findings"] if f["code"] == "MLA001" and f["family"] == "synthetic"]
    assert len(stalls) == PROCESSES and len({f["process"]["rank"] for f in stalls}) == PROCESSES, report["findings"]
    [family] = [f for f in report["families"] if f["name"] == "synthetic"]
    counted = {(v["key"]["dtype"], v["key"]["causal"]): v for v in family["variants"]}
    assert not any(v["dispatches_at_least"] for v in counted.values())
    assert counted["int8", True]["dispatches"] == PROCESSES
    assert sum(v["dispatches"] for v in counted.values()) == PROCESSES * (DISPATCHES + 1)


def program_seconds(stdout: str) -> float:
    line = next(line for line in stdout.splitlines() if line.startswith("program_seconds"))
    return float(line.split()[1])


def rules_folder(folder: Path, library: str | None) -> Path:
    rules = folder / f"rules-{library}"
    rules.mkdir(exist_ok=True)
    for path in [SYNTHETIC, *LIBRARIES[library]]:
        (rules / path.name).write_bytes(path.read_bytes())
    return rules


def measure(name: str, turns: int, env: dict, folder: Path) -> None:
    at_once, library = SETTINGS[name]
    rules = rules_folder(folder, library)
    arms = {
        "plain": lambda: plain(at_once, library, env),
        "observed": lambda: observed(at_once, library, env, folder, rules),
    }
    arms["plain"](), arms["observed"]()  # the bytecode caches, the page cache
    runs: dict[str, list[tuple[float, float, float]]] = {"plain": [], "observed": []}
    ratios: dict[str, list[float]] = {"wall": [], "cpu": [], "program": []}
    for _ in range(turns):
        turn = {"plain": [], "observed": []}
        for arm in ("plain", "observed", "observed", "plain"):  # A B B A
            turn[arm].append(arms[arm]())
        for arm, rows in turn.items():
            runs[arm] += rows
        for column, what in enumerate(ratios):
            ratios[what].append(sum(r[column] for r in turn["observed"]) / sum(r[column] for r in turn["plain"]))
    median = {arm: [statistics.median(r[column] for r in rows) for column in range(3)] for arm, rows in runs.items()}
    ratio = statistics.median(ratios["wall"])
    spread = {what: f"{statistics.median(v):.3f} ({min(v):.3f} .. {max(v):.3f})" for what, v in ratios.items()}
    print(
        f"{name}: {PROCESSES} spawned processes, {at_once} at a time, {library + ' and ' if library else ''}the synthetic family: "
        f"wall plain {median['plain'][0]:.2f} s, observed {median['observed'][0]:.2f} s (medians of {2 * turns}); "
        f"ratio {spread['wall']} over {turns} turn(s) (target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'}); "
        f"CPU plain {median['plain'][1]:.2f} s, observed {median['observed'][1]:.2f} s, ratio {spread['cpu']}; the "
        f"program's own wall time {spread['program']}; evidence checked in every observed run",
        flush=True,
    )


def main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(DEFAULT)
    unknown = [name for name in names if name not in SETTINGS]
    if unknown:
        sys.exit(f"unknown setting {unknown[0]!r}: choose from {', '.join(SETTINGS)}")
    with tempfile.TemporaryDirectory() as folder:
        env = {name: value for name, value in os.environ.items() if not name.startswith("MLACHECK_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update(PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(Path(folder) / "pycache"))
        print(f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
        for name in names:
            measure(name, turns, env, Path(folder))
        print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
