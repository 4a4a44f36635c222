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
"""


def observed(tmp_path, modules: tuple[str, ...]) -> tuple[list[str], str]:
    """Run the program under `mlacheck run`: which of `modules` it loaded, and its traces' text."""
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
    return json.loads(done.stdout.splitlines()[0]), "".join(
        trace.read_text() for trace in run_dir.glob("trace-*.jsonl")
    )


def test_a_process_that_imports_a_watched_library_loads_no_pydantic_typer_or_rich(tmp_path):
    loaded, traces = observed(tmp_path, HEAVY)
    assert loaded == []
    assert '"type":"compile"' in traces  # it was observed: its family was installed and recorded


def test_a_watched_import_loads_no_inspect_or_hashlib_where_its_family_needs_none(tmp_path):
    """A family without key functions (nothing to fingerprint) whose functions wrap nothing: its install loads no
    inspect (ast, dis, tokenize: about 6 ms) nor hashlib (OpenSSL: about 3 ms) in a process that did not load them
    itself: 64 spawned workers pay it 64 times (issue 29)."""
    loaded, traces = observed(tmp_path, ("inspect", "ast", "dis", "tokenize", "hashlib", "_hashlib", "base64"))
    assert loaded == []
    assert '"type":"family"' in traces and '"type":"compile"' in traces  # installed, and it recorded
