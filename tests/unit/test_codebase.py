"""The habits of the codebase, checked as the tests run: ruff's lint and format check, the import contract in
pyproject.toml (the layers; no import circle between sibling modules), and small functions in small modules."""

import subprocess
import sys
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "mlacheck").rglob("*.py"), ROOT / "mlacheck_startup.py"])
MOST_COMPLEX = 20  # radon's cyclomatic complexity of a function or method (a nested function counts in its own)
MOST_LINES = 500  # of a module


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


def test_no_function_is_above_complexity_20():
    """Issue 30: a function doing several jobs is a few small functions or a table (radon cc, as `radon cc -n D`)."""
    complex_ = {}
    for path in SOURCES:
        for block in cc_visit(path.read_text(encoding="utf-8")):
            name = f"{path.relative_to(ROOT)}:{block.fullname}"
            if isinstance(block, Function) and block.complexity > MOST_COMPLEX:
                complex_[name] = block.complexity
    assert complex_ == {}, complex_


def test_no_module_is_above_500_lines():
    """Issue 30: a module has one job, and a newcomer reads it whole."""
    long = {str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines()) for path in SOURCES}
    assert {path: lines for path, lines in long.items() if lines > MOST_LINES} == {}
