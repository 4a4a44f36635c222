"""`mlacheck report` at engine scale (issue 29; target: 10^5 variants in <= 50 us and <= 5 KB a variant, peak RSS,
with and without findings). A program observed in program mode (the synthetic family, real capture) makes the run
folder: clean, every variant precompiled then dispatched; with findings, half precompiled and never dispatched
(MLA002) and half compiled on the serving path (MLA001). Then `mlacheck report RUN --output json:... --output
sarif:... --output junit:...` runs in a child process, A B B A (clean, findings, findings, clean), and its wall time
(and CPU time) and peak RSS (`resource.getrusage(RUSAGE_CHILDREN)` of that child alone) are divided by the variants.
The same for a run of 100 variants gives the fixed cost (the interpreter and its imports), printed beside.
Usage (from the repository root): python tests/benchmarks/bench_report_scale.py [VARIANTS]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "tests" / "fixtures" / "synthetic.toml"
TARGET_US, TARGET_KB = 50.0, 5.0
PROGRAM = """
import sys
import mlacheck
from tests.fixtures import synthetic_kernels as k

variants, findings = int(sys.argv[1]), sys.argv[2] == "findings"
k.COMPILE_SECONDS = 0.0
names = [f"v{i}" for i in range(variants)]
warm = names[: variants // 2] if findings else names
k.warmup(dtypes=warm, causal=(True,))
mlacheck.serving_started()
for name in names[variants // 2 :] if findings else names:
    k.dispatch(1, name)
"""


def run_folder(folder: Path, variants: int, findings: bool) -> Path:
    """A run folder of `variants` variants, made by observing the program."""
    run_dir = folder / f"run-{variants}-{'findings' if findings else 'clean'}"
    subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", str(RULES), "--run-dir", str(run_dir)]
        + ["--allow-incomplete", "--", sys.executable, "-c", PROGRAM, str(variants)]
        + ["findings" if findings else "clean"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
    )
    assert list(run_dir.glob("trace-*.jsonl")), f"no trace in {run_dir}"
    return run_dir


MEASURE = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True)
seconds = time.perf_counter() - started
used = resource.getrusage(resource.RUSAGE_CHILDREN)
peak, cpu = used.ru_maxrss, used.ru_utime + used.ru_stime
print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_kb": peak, "rc": done.returncode, "err": done.stderr.decode()[-400:]}))
"""


def report(run_dir: Path, out: Path) -> dict:
    """`mlacheck report` of a run folder with the machine outputs, in a child process of its own (its peak RSS alone)."""
    command = [sys.executable, "-m", "mlacheck", "report", "-q", str(run_dir), "--allow-incomplete"]
    command += [f"--output=json:{out / 'report.json'}", f"--output=sarif:{out / 'report.sarif'}"]
    command += [f"--output=junit:{out / 'report.xml'}"]
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *command], cwd=ROOT, capture_output=True, text=True, check=True
    )
    measured = json.loads(done.stdout)
    assert measured["rc"] in (0, 1), measured["err"]
    data = json.loads((out / "report.json").read_text())
    measured["variants"] = sum(len(family["variants"]) for family in data["families"])
    measured["findings"] = len(data["findings"])
    return measured


def main() -> None:
    variants = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        started = time.perf_counter()
        runs = {
            (size, kind): run_folder(base, size, kind == "findings")
            for size in (100, variants)
            for kind in ("clean", "findings")
        }
        print(f"run folders made in {time.perf_counter() - started:.0f} s (observed programs)")
        print(f"load average {os.getloadavg()[0]:.1f} at the start of the reports", flush=True)
        results: dict[tuple, list[dict]] = {key: [] for key in runs}
        for kind in ("clean", "findings", "findings", "clean"):  # A B B A
            for size in (100, variants):
                results[(size, kind)].append(report(runs[(size, kind)], base))
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    for kind in ("clean", "findings"):
        small, large = results[(100, kind)], results[(variants, kind)]
        seen = large[0]["variants"]
        assert seen == variants, f"the report holds {seen} of {variants} variants"
        seconds = statistics.median(r["seconds"] for r in large)
        peak = statistics.median(r["peak_kb"] for r in large)
        fixed_s = statistics.median(r["seconds"] for r in small)
        fixed_kb = statistics.median(r["peak_kb"] for r in small)
        us, kb = seconds / variants * 1e6, peak / variants
        cpu_us = statistics.median(r["cpu"] for r in large) / variants * 1e6
        print(
            f"mlacheck report of {variants:,} variants, {kind} ({large[0]['findings']:,} findings; JSON, SARIF and "
            f"JUnit written; median of 2): {seconds:.2f} s, peak RSS {peak / 1024:.0f} MB: {us:.1f} us a variant "
            f"(target <= {TARGET_US:.0f}: {'met' if us <= TARGET_US else 'NOT met'}; CPU {cpu_us:.1f} us), {kb:.2f} KB a "
            f"variant (target "
            f"<= {TARGET_KB:.0f}: {'met' if kb <= TARGET_KB else 'NOT met'}); a run of 100 variants: {fixed_s:.2f} s, "
            f"{fixed_kb / 1024:.0f} MB (the interpreter and its imports), so {(seconds - fixed_s) / variants * 1e6:.1f}"
            f" us and {(peak - fixed_kb) / variants:.2f} KB a variant beyond it"
        )


if __name__ == "__main__":
    main()
