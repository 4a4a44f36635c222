"""What an observed process pays to import a watched library (issue 29; target: <= 30 ms over plain), measured in one
run: `import` of the synthetic kernel family timed inside the process, plain (no run) against observed
(MLACHECK_RUN_DIR set: the agent installs the family's capture as the import finishes), A B B A, the median of each
arm; in two settings: with torch imported first, as every watched library does (tokenspeed_mla, flash-attn-4,
FlashInfer and Triton import it, and with it importlib.metadata, inspect, hashlib and email: the target is judged
here), and bare (the synthetic module imports nothing, so every module capture loads counts: the worst case). Also the
modules each arm loaded, and whether pydantic, typer or rich were among them.
Usage (from the repository root): python tests/benchmarks/bench_watched_import.py [TURNS]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "tests" / "fixtures" / "synthetic.toml"
TARGET_MS = 30.0
PROBE = """
import json, sys, time
if sys.argv[1] == "torch":
    import torch  # what a watched library imports first
before = set(sys.modules)
started = time.perf_counter()
import tests.fixtures.synthetic_kernels
seconds = time.perf_counter() - started
loaded = set(sys.modules) - before
heavy = sorted({m.split(".")[0] for m in loaded} & {"pydantic", "typer", "rich"})
print(json.dumps({"ms": seconds * 1e3, "modules": len(loaded), "heavy": heavy}))
"""


def run_folder(folder: Path) -> Path:
    """A run folder that observes the synthetic family (made by a short `mlacheck run`)."""
    run_dir = folder / "run"
    subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", str(RULES), "--run-dir", str(run_dir)]
        + ["--allow-incomplete", "--", sys.executable, "-c", "pass"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        check=True,
    )
    return run_dir


def once(env: dict, setting: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, setting], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    base = {name: value for name, value in os.environ.items() if name != "MLACHECK_RUN_DIR"}
    with tempfile.TemporaryDirectory() as folder:
        run_dir = run_folder(Path(folder))
        arms = {"plain": {**base, "PYTHONPATH": str(ROOT)}, "observed": {**base, "PYTHONPATH": str(ROOT)}}
        arms["observed"]["MLACHECK_RUN_DIR"] = str(run_dir)
        for setting, label in (("torch", "with torch imported first"), ("bare", "bare (nothing imported first)")):
            results: dict[str, list[dict]] = {"plain": [], "observed": []}
            for _ in range(turns):
                for arm in ("plain", "observed", "observed", "plain"):  # A B B A
                    results[arm].append(once(arms[arm], setting))
            report(label, results, setting == "torch")
        assert len(list(run_dir.glob("trace-*.jsonl"))) >= 4 * turns, "the observed arm was not observed"


def report(label: str, results: dict[str, list[dict]], judged: bool) -> None:
    ms = {arm: statistics.median(r["ms"] for r in rows) for arm, rows in results.items()}
    modules = {arm: statistics.median(r["modules"] for r in rows) for arm, rows in results.items()}
    heavy = sorted({m for r in results["observed"] for m in r["heavy"]})
    added = ms["observed"] - ms["plain"]
    verdict = f" (target <= {TARGET_MS:.0f} ms: {'met' if added <= TARGET_MS else 'NOT met'})" if judged else ""
    print(
        f"import of a watched library, {label} (medians of {2 * len(results['plain']) // 2}, A B B A): plain "
        f"{ms['plain']:.1f} ms, observed {ms['observed']:.1f} ms: {added:+.1f} ms added{verdict}; modules loaded "
        f"{modules['plain']:.0f} vs {modules['observed']:.0f}; pydantic/typer/rich loaded: {heavy or 'none'}"
    )


if __name__ == "__main__":
    main()
