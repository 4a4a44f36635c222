"""Run folders only their owner controls (one user): made private, never shared by two runs, never taken where someone
else could write them, and what a folder may ask of the processes that join it is an allow-list."""

import os
import stat
import subprocess
import sys

import pytest

from mlacheck.errors import MlacheckError
from mlacheck.program.run_folder import RunFolder
from mlacheck.program.trust import allowed_environment
from tests.security.conftest import ROOT, SYNTHETIC, environment


def mlacheck_run(run_dir, *command: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlacheck",
            "run",
            "-q",
            "--rules",
            SYNTHETIC,
            "--run-dir",
            str(run_dir),
            "--",
            *command,
        ],
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_runs_started_at_once_on_one_new_folder_never_share_it(tmp_path):
    """Redteam 1.15: the check for an empty folder, then its creation, let two runs take one folder (2 of 12)."""
    for attempt in range(6):
        run_dir = tmp_path / f"run{attempt}"
        runs = [mlacheck_run(run_dir, sys.executable, "-c", "pass") for _ in range(2)]
        done = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
        refused = [err for code, err in done if code == 2 and ("not empty" in err or "another run took it" in err)]
        assert len(refused) == 1, done  # the other ran (incomplete: `python -c pass` loads no kernel family)


def test_a_run_folder_is_made_private_whatever_the_umask(tmp_path):
    old = os.umask(0o002)
    try:
        run = RunFolder.create(tmp_path / "new")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(run.path).st_mode) == 0o700
    run.write_meta({"command": ["x"]})
    assert stat.S_IMODE(os.lstat(run.meta_path).st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o770, 0o707])
def test_an_existing_folder_others_can_write_is_refused(tmp_path, mode):
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, mode)
    with pytest.raises(MlacheckError, match="can be written by others"):
        RunFolder.create(folder)


def test_a_link_where_the_run_folder_should_be_is_refused(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(MlacheckError, match="is a symbolic link"):
        RunFolder.create(tmp_path / "link")


def test_a_link_in_place_of_meta_json_is_replaced_never_written_through(tmp_path):
    run = RunFolder.create(tmp_path / "run")
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    run.meta_path.symlink_to(precious)
    run.write_meta({"command": ["x"]})
    assert precious.read_text() == "precious" and not run.meta_path.is_symlink()


def test_the_default_parent_made_by_someone_else_or_open_to_others_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlacheck-runs").mkdir()
    os.chmod(tmp_path / "mlacheck-runs", 0o777)
    with pytest.raises(MlacheckError, match="mlacheck-runs .* can be written by others"):
        RunFolder.create(None)
    os.chmod(tmp_path / "mlacheck-runs", 0o755)
    assert RunFolder.create(None).path.parent == tmp_path / "mlacheck-runs"


def test_a_run_folder_asks_processes_only_for_the_variables_its_rules_read():
    config = {
        "arch_env": ["CUTE_DSL_ARCH", "LD_PRELOAD"],  # a rule naming LD_PRELOAD still does not get it
        "families": [{"family": {"sm_count_env": ["FLASH_ATTENTION_NUM_SMS", "PYTHONPATH"]}}],
        "environment": {
            "CUTE_DSL_ARCH": "sm_100a",
            "FLASH_ATTENTION_NUM_SMS": "148",
            "MLACHECK_SERVING_START": "m:f",
            "LD_PRELOAD": "/tmp/evil.so",
            "PYTHONPATH": "/tmp/evil",
            "PATH": "/tmp/evil",
            "BASH_ENV": "/tmp/evil",
            "OTHER": "x",
        },
    }
    assert allowed_environment(config) == {
        "CUTE_DSL_ARCH": "sm_100a",
        "FLASH_ATTENTION_NUM_SMS": "148",
        "MLACHECK_SERVING_START": "m:f",
    }
