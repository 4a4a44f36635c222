"""The wheel `pip install .` builds holds every module and data file of the source tree (an editable install, which the
development venv uses, would hide a package the build leaves out: mlacheck.analysis.checks was, once), and the
start path's .pth and module."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_every_module_and_data_file(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [wheel] = tmp_path.glob("mlacheck-*.whl")
    held = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "mlacheck"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    wanted = {path for path in tracked if path.endswith((".py", ".toml", ".json"))}
    assert wanted, "git ls-files found no source: run from a checkout"
    assert sorted(wanted - held) == []
    assert {"mlacheck-startup.pth", "mlacheck_startup.py"} <= held
