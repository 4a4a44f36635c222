"""A run folder grows with variants, not with time (issue 29; target: a server that dispatches over 5000 warmed
variants for 24 s gains <= 16 KB in its run folder after its first 8 s). The server warms 5000 variants of the
synthetic family, marks serving start, then dispatches over all of them for 24 s; it measures its own run folder at
8 s and at 24 s of serving (before its exit writes the final counts). Before counts were state, every 5 s appended a
full cumulative counts table (about 100 KB at 5000 variants).
Usage (from the repository root): python tests/benchmarks/bench_run_folder_growth.py [SECONDS]
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "tests" / "fixtures" / "synthetic.toml"
TARGET_BYTES = 16 * 1024
SERVER = """
import os, sys, time
import mlacheck
from tests.fixtures import synthetic_kernels as k

def folder_bytes():
    run_dir = os.environ["MLACHECK_RUN_DIR"]
    return sum(os.path.getsize(os.path.join(run_dir, name)) for name in os.listdir(run_dir))

seconds = float(sys.argv[1])
k.COMPILE_SECONDS = 0.0
dtypes = [f"v{i}" for i in range(5000)]
k.warmup(dtypes=dtypes, causal=(True,))
mlacheck.serving_started()
started, sizes, dispatches = time.monotonic(), {}, 0
while True:
    for dtype in dtypes:
        k.dispatch(1, dtype)
    dispatches += len(dtypes)
    now = time.monotonic() - started
    if now >= seconds / 3 and "first" not in sizes:
        sizes["first"] = (now, folder_bytes())
    if now >= seconds:
        sizes["last"] = (now, folder_bytes())
        break
print("SIZES", sizes["first"][0], sizes["first"][1], sizes["last"][0], sizes["last"][1], dispatches)
"""


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 24.0
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder) / "run"
        done = subprocess.run(
            [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", str(RULES), "--run-dir", str(run_dir)]
            + ["--", sys.executable, "-c", SERVER, str(seconds)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
        )
        line = next((line for line in done.stdout.splitlines() if line.startswith("SIZES")), None)
        assert line is not None, done.stdout + done.stderr
        _, first_t, first, last_t, last, dispatches = line.split()
        final = sum(path.stat().st_size for path in run_dir.iterdir() if path.is_file())
    grown = int(last) - int(first)
    print(
        f"run folder of a server over 5000 warmed variants ({int(dispatches):,} dispatches in {float(last_t):.0f} s): "
        f"{int(first) / 1024:.0f} KB at {float(first_t):.1f} s, {int(last) / 1024:.0f} KB at {float(last_t):.1f} s: "
        f"{grown / 1024:+.1f} KB after the first {float(first_t):.0f} s (target <= {TARGET_BYTES // 1024} KB: "
        f"{'met' if grown <= TARGET_BYTES else 'NOT met'}); {final / 1024:.0f} KB with the final counts at exit"
    )


if __name__ == "__main__":
    main()
