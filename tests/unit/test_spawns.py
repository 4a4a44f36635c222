"""The agent's record of the children a process starts by a fork and exec it cannot see from Python
(`program/spawns.py`), driven through the real subprocess module and os.posix_spawn."""

import _posixsubprocess
import os
import subprocess
import sys

import pytest

from mlacheck.program import spawns


def hooked(monkeypatch, active: bool) -> list[dict]:
    """The spawn events of this test's children (the spawn functions hooked for the test, restored after it)."""
    for module_name, name in spawns.SPAWN_FUNCTIONS:
        module = sys.modules[module_name]
        if hasattr(module, name):
            monkeypatch.setattr(module, name, getattr(module, name))
    events: list[dict] = []
    spawns.hook(lambda make: events.append(make()), lambda: active)
    return events


@pytest.fixture
def written(monkeypatch):
    return hooked(monkeypatch, active=True)


def test_a_child_started_by_subprocess_is_written_with_what_it_runs_and_its_rank(written):
    child = subprocess.Popen([sys.executable, "-S", "-c", "pass"], env={"RANK": "4"})
    child.wait()
    [event] = written
    assert event["type"] == "spawn" and event["child"] == child.pid and event["python"] is True
    assert event["argv"] == [sys.executable, "-S", "-c", "pass"] and event["rank"] == 4


def test_a_child_started_by_posix_spawn_and_a_shell_are_told_apart(written):
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", "true"], {"LOCAL_RANK": "2"})
    os.waitpid(pid, 0)
    python = os.posix_spawn(sys.executable, [sys.executable, "-S", "-c", "pass"], os.environ)
    os.waitpid(python, 0)
    assert [(e["child"], e["python"], e["path"]) for e in written] == [
        (pid, False, "/bin/sh"),
        (python, True, sys.executable),
    ]
    assert written[0]["rank"] == 2


def test_an_interpreter_under_another_name_is_python_by_what_it_resolves_to(tmp_path, written):
    engine = tmp_path / "engine"
    engine.symlink_to(os.path.realpath(sys.executable))
    subprocess.run([str(engine), "-S", "-c", "pass"], check=True)
    assert [e["python"] for e in written] == [True]


def test_nothing_is_written_while_capture_is_off(monkeypatch):
    events = hooked(monkeypatch, active=False)
    subprocess.run(["true"], check=True)
    assert events == [] and getattr(_posixsubprocess.fork_exec, "_mlacheck_spawn", False)


@pytest.mark.parametrize(
    ("env", "rank"),
    [
        ({"RANK": "3", "LOCAL_RANK": "1"}, 3),
        ({"LOCAL_RANK": "1"}, 1),
        ({"RANK": "²"}, None),  # a digit, not a decimal number: int() refuses it
        ([b"RANK=7", b"PATH=/bin"], 7),
        ({}, None),
    ],
)
def test_the_rank_of_an_environment_is_a_decimal_number_or_none(env, rank):
    assert spawns.environment_rank(env) == rank
