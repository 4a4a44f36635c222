"""`mlacheck run -- python ...` where `python` is pyenv's shim (pyenv's own bash scripts find the interpreter and exec
it): the run is judged on what the program did, never incomplete for pyenv's `pyenv-which`, which the process tree
sees while it runs and which sources hook scripts mlacheck cannot read (`source "$script"`). A hook that takes 0.5 s
(as a pyenv plugin's may) makes the tree see it at every run."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.adversarial.conftest import WARM, observe, program

PYENV = shutil.which("pyenv")


def pyenv_root() -> Path:
    return Path(subprocess.run([PYENV, "root"], capture_output=True, text=True, check=True).stdout.strip())


@pytest.mark.skipif(PYENV is None, reason="pyenv is not installed")
def test_a_program_run_through_pyenvs_shim_passes_on_its_evidence(tmp_path):
    hooks = tmp_path / "hooks" / "which"
    hooks.mkdir(parents=True)
    (hooks / "slow.bash").write_text("sleep 0.5\n")
    shim = pyenv_root() / "shims" / "python"
    env = {"PYENV_HOOK_PATH": str(tmp_path / "hooks")}
    result = observe(tmp_path, str(shim), program(tmp_path, "import mlacheck\n" + WARM), env=env)
    context = f"\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.report["verdict"] == "pass" and result.code == 0, context
    [process] = result.report["processes"]  # (the shim's process, become Python)
    tree = json.loads((result.run_dir / "processes.json").read_text())["processes"]
    which = [record for record in tree if record["argv"][1:2] == [str(pyenv_root() / "libexec" / "pyenv-which")]]
    assert which, f"the process tree never saw pyenv-which: the test proves nothing\n{tree}"
