"""An observed process pays for nothing heavy: importing a watched library installs its capture from capture.json's
plain form (`mlacheck.rulefiles.plain`), and loads nothing of pydantic, typer or rich that the program did not import
itself (redteam section 3: +116 to +292 ms a process before)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pydantic", "typer", "rich", "mlacheck.rulefiles.schema", "mlacheck.rulefiles.loading")
PROGRAM = f"""
import json, sys
from tests.fixtures import synthetic_kernels as k
k.warmup(dtypes=("fp8",), causal=(True,))
k.dispatch(1)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r} or m in {HEAVY!r})))
print(sys.modules["mlacheck.capture.hotpath"].IMPLEMENTATION)
"""
INSPECT = ("inspect", "ast", "dis", "tokenize")  # inspect and what it imports


def observed(tmp_path, modules: tuple[str, ...]) -> tuple[list[str], str, str]:
    """Run the program under `mlacheck run`: which of `modules` it loaded, its traces' text, and which hot path it ran
    (the mlacheck on PYTHONPATH: this checkout's, compiled where it was built in place)."""
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "--rules", str(ROOT / "tests" / "fixtures" / "synthetic.toml")]
        + ["--run-dir", str(run_dir), "--", sys.executable, "-c", PROGRAM.replace(f"{HEAVY!r}", f"{modules!r}")],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    loaded, implementation = done.stdout.splitlines()[:2]
    return json.loads(loaded), "".join(t.read_text() for t in run_dir.glob("trace-*.jsonl")), implementation


def test_a_process_that_imports_a_watched_library_loads_no_pydantic_typer_or_rich(tmp_path):
    loaded, traces, _ = observed(tmp_path, HEAVY)
    assert loaded == []
    assert '"type":"compile"' in traces  # it was observed: its family was installed and recorded


def test_a_watched_import_loads_no_inspect_or_hashlib_where_its_family_needs_none(tmp_path):
    """A family without key functions (nothing to fingerprint) whose functions wrap nothing: its install loads no
    inspect (ast, dis, tokenize: about 6 ms) nor hashlib (OpenSSL: about 3 ms) in a process that did not load them
    itself: 64 spawned workers pay it 64 times (issue 29). The pure-Python hot path's forwarder reads a signature
    (inspect): where the checkout's hot path is not built, that much is its own."""
    loaded, traces, implementation = observed(tmp_path, (*INSPECT, "hashlib", "_hashlib", "base64"))
    assert [m for m in loaded if implementation == "c" or m not in INSPECT] == []
    assert '"type":"family"' in traces and '"type":"compile"' in traces  # installed, and it recorded
