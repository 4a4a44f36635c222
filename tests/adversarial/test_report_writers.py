"""The files of a large report written by forked writer processes (report/writers.py), attacked with real processes
and signals: a writer killed, one that cannot write, one with a bug, the command killed or interrupted while they
write. None may end in a command that says its documents were written when one was not, or leave a writer behind.
`writers.BESIDE = 1` makes a gold report large enough, and the command runs on two CPUs: one writer process writes
the JSON and JUnit files while the command writes the SARIF file; everything else is the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mlacheck.report import writers
from tests.gold import gold

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs and Linux"
)

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ("json", "sarif", "junit")
CLI = """
import os, sys, signal, time, errno
from mlacheck.report import formats, writers, jsonreport, sarif, junit
writers.BESIDE = int(os.environ["BESIDE"])
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
PARENT = os.getpid()
made = writers.Writer.__init__
def counted(self, *args):
    made(self, *args)
    with open(os.environ["FORKS"], "a") as file:
        file.write(str(self.pid) + "\\n")
writers.Writer.__init__ = counted
def in_writer():
    return os.getpid() != PARENT
{patch}
from mlacheck.cli import main
sys.argv = ["mlacheck", *sys.argv[1:]]
main()
"""


def _command(tmp_path: Path, patch: str = "", beside: int = 1, name: str = "out") -> tuple[list[str], dict, Path]:
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(gold("scenario")))
    out = tmp_path / name
    out.mkdir()
    command = [sys.executable, "-c", CLI.format(patch=patch), "report", "-q", str(saved)]
    command += [f"--output={fmt}:{out / ('report.' + fmt)}" for fmt in FORMATS]
    env = {**os.environ, "BESIDE": str(beside), "FORKS": str(out / "forks"), "PYTHONPATH": str(ROOT)}
    return command, env, out


def _run(tmp_path: Path, patch: str = "", beside: int = 1, name: str = "out"):
    command, env, out = _command(tmp_path, patch, beside, name)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    forks = (out / "forks").read_text().split() if (out / "forks").exists() else []
    return done, out, forks


def test_files_written_side_by_side_are_the_bytes_written_in_turn(tmp_path):
    side, side_out, forks = _run(tmp_path, name="side")
    turn, turn_out, none = _run(tmp_path, beside=10**9, name="turn")
    assert len(forks) == 1 and none == []  # (one writer, then none: the report is too small)
    assert side.returncode == turn.returncode == 1, side.stderr  # (the gold report's findings fail it)
    assert side.stdout == turn.stdout and side.stderr == turn.stderr == ""
    for fmt in FORMATS:
        written = (side_out / f"report.{fmt}").read_bytes()
        assert written == (turn_out / f"report.{fmt}").read_bytes() and len(written) > 1000


def test_a_killed_writer_fails_the_command_and_names_its_file(tmp_path):
    patch = """
encoded = junit.encoded
def killed(report, options):
    if in_writer():
        os.kill(os.getpid(), signal.SIGKILL)
    return encoded(report, options)
junit.encoded = killed
"""
    done, out, forks = _run(tmp_path, patch)
    assert len(forks) == 1 and done.returncode == 2
    path = out / "report.junit"  # (the writer's second file: its first was written)
    assert done.stderr == (
        f"mlacheck: error: --output junit:{path}: cannot write {path}: its writer process was killed (SIGKILL) before "
        "it finished\n"
    )
    assert json.loads((out / "report.json").read_text())["verdict"] == "fail"  # (the others are whole)
    assert json.loads((out / "report.sarif").read_text())["runs"]


def test_a_writer_that_exits_0_before_its_last_file_fails_the_command(tmp_path):
    patch = """
def gone(report, options):
    if in_writer():
        os._exit(0)
junit.encoded = gone
"""
    done, out, forks = _run(tmp_path, patch)
    path = out / "report.junit"
    assert len(forks) == 1 and done.returncode == 2
    assert done.stderr == (
        f"mlacheck: error: --output junit:{path}: cannot write {path}: its writer process exited 0 before it finished\n"
    )


def test_a_writer_that_cannot_write_says_so_as_a_write_here_does(tmp_path):
    patch = """
write = formats._write
def full(path, document):
    if in_writer() and path.suffix == ".json":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return write(path, document)
formats._write = full
"""
    done, out, forks = _run(tmp_path, patch)
    path = out / "report.json"
    assert len(forks) == 1 and done.returncode == 2
    assert done.stderr == f"mlacheck: error: --output json:{path}: cannot write {path}: No space left on device\n"


def test_a_bug_in_a_writer_is_an_internal_error(tmp_path):
    patch = """
def broken(report, options):
    raise ValueError("boom")
junit.encoded = broken
"""
    done, _, forks = _run(tmp_path, patch)
    assert len(forks) == 1 and done.returncode == 2
    assert "internal error: RuntimeError: the process writing junit failed: ValueError: boom" in done.stderr
    assert done.stderr.count("\n") == 1


SLOW = """
encoded = jsonreport.encoded
def slow(report, options):
    if in_writer():
        time.sleep(60)
    return encoded(report, options)
jsonreport.encoded = slow
"""


def _writers_started(out: Path, count: int = 1) -> list[int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        forks = (out / "forks").read_text().split() if (out / "forks").exists() else []
        if len(forks) == count:
            return [int(pid) for pid in forks]
        time.sleep(0.05)
    raise AssertionError("the writers never started")


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_command_leaves_no_writer_behind(tmp_path):
    command, env, out = _command(tmp_path, SLOW)
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pids = _writers_started(out)
        process.kill()
        process.wait(timeout=30)
        assert all(_gone(pid) for pid in pids)
    finally:
        process.kill()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_an_interrupted_command_ends_its_writers_and_says_so(tmp_path):
    command, env, out = _command(tmp_path, SLOW)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = _writers_started(out)
        time.sleep(0.5)  # (the command is awaiting them)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 130, stderr
        assert all(_gone(pid, within=1.0) for pid in pids)  # (ended and reaped before the command exited)
    finally:
        process.kill()


def _large(count: int = writers.BESIDE) -> dict:
    return {"findings": [{}] * count, "families": []}


def test_only_a_large_report_in_files_of_their_own_is_shared_between_processes(tmp_path, monkeypatch):
    files = [("json", tmp_path / "a.json"), ("junit", tmp_path / "b.xml"), ("sarif", tmp_path / "c.sarif")]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert writers.shares(_large(), files) == [[files[0], files[2]], [files[1]]]  # (a process a CPU: the last here)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert writers.shares(_large(), files) == [[file] for file in files]  # (no more processes than files)
    assert not writers.shares(_large(writers.BESIDE - 1), files)  # small: not worth a fork
    assert not writers.shares(_large(), files[:1])  # one file: nothing to share
    assert not writers.shares(_large(), [files[0], ("json", tmp_path / "." / "a.json")])  # the same file twice
    assert not writers.shares(_large(), [files[0], ("json", Path(os.devnull))])  # not a file of its own
    os.mkfifo(tmp_path / "fifo")
    assert not writers.shares(_large(), [files[0], ("json", tmp_path / "fifo")])
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not writers.shares(_large(), files)  # another thread alive: a fork could copy a held lock
    finally:
        stop.set()
        other.join()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert not writers.shares(_large(), files)  # one CPU: nothing runs beside
