"""The habits of the codebase, checked as the tests run: ruff's lint and format check, and the import contract in
pyproject.toml (the layers; no import circle between sibling modules)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_lint_passes():
    done = run(sys.executable, "-m", "ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_is_kept():
    done = run(sys.executable, "-m", "ruff", "format", "--check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_module_imports_a_layer_above_its_own_and_no_import_circle():
    done = run(
        sys.executable,
        "-c",
        "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 4 kept, 0 broken." in done.stdout


def test_an_engine_is_named_in_its_own_modules_only():
    """Issue 30: the scenario and the CLI name vLLM and SGLang in at most two files each (the engine's module, and the
    backend only that engine drives), so that an engine's facts live in one place."""
    files = [*(ROOT / "mlacheck" / "scenario").rglob("*.py"), ROOT / "mlacheck" / "cli.py"]
    for engine in ("vllm", "sglang"):
        naming = sorted(str(path.relative_to(ROOT)) for path in files if engine in path.read_text().lower())
        assert len(naming) <= 2, (engine, naming)
